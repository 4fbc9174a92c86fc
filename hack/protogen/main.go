// Command protogen generates the Go code of the protocol buffer APIs that
// meshpilot keeps in api/ (those with no published Go module, such as
// Istio's istio.workload), without a protoc binary: bufbuild/protocompile
// parses the .proto files and protoc-gen-go runs as a library, both pinned
// in go.mod, so `make generate` gives the same bytes on every machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/bufbuild/protocompile"
	gengo "google.golang.org/protobuf/cmd/protoc-gen-go/internal_gengo"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/pluginpb"
)

// Target is one .proto file (relative to the import root) and where its
// generated Go code is committed (relative to the repository root).
type Target struct {
	Proto string
	Out   string
}

// Targets are the files `make generate` regenerates.
var Targets = []Target{
	{Proto: "workload/workload.proto", Out: "pkg/workloadapi/workload.pb.go"},
}

// importRoot is where .proto imports are resolved from, relative to the
// repository root.
const importRoot = "api"

func main() {
	root := flag.String("root", ".", "repository root")
	flag.Parse()
	for _, t := range Targets {
		code, err := Generate(*root, t.Proto)
		if err != nil {
			fmt.Fprintln(os.Stderr, "protogen:", err)
			os.Exit(1)
		}
		out := filepath.Join(*root, t.Out)
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "protogen:", err)
			os.Exit(1)
		}
		if err := os.WriteFile(out, code, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "protogen:", err)
			os.Exit(1)
		}
	}
}

// Generate compiles one .proto file and returns the Go code protoc-gen-go
// writes for it.
func Generate(root, file string) ([]byte, error) {
	compiler := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			ImportPaths: []string{filepath.Join(root, importRoot)},
		}),
		// Comments in the .proto become the Go doc comments.
		SourceInfoMode: protocompile.SourceInfoStandard,
	}
	files, err := compiler.Compile(context.Background(), file)
	if err != nil {
		return nil, err
	}
	req := &pluginpb.CodeGeneratorRequest{FileToGenerate: []string{file}}
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		// Dependencies first: protogen wants them in topological order.
		imports := fd.Imports()
		for i := range imports.Len() {
			add(imports.Get(i).FileDescriptor)
		}
		req.ProtoFile = append(req.ProtoFile, protodesc.ToFileDescriptorProto(fd))
	}
	add(files[0])

	gen, err := protogen.Options{}.New(req)
	if err != nil {
		return nil, err
	}
	for _, f := range gen.Files {
		if f.Generate {
			gengo.GenerateFile(gen, f)
		}
	}
	resp := gen.Response()
	if resp.Error != nil {
		return nil, errors.New(resp.GetError())
	}
	if len(resp.File) != 1 {
		return nil, fmt.Errorf("%s: protoc-gen-go wrote %d files, want 1", file, len(resp.File))
	}
	return []byte(resp.File[0].GetContent()), nil
}
