package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestCommittedCodeIsCurrent regenerates every target and fails if the
// committed Go code differs: CI never regenerates, so an edited .proto
// without `make generate` (or a protobuf bump) must not pass unnoticed.
func TestCommittedCodeIsCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	for _, target := range Targets {
		t.Run(target.Proto, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(root, target.Out))
			if err != nil {
				t.Fatalf("read committed code: %v (run make generate)", err)
			}
			got, err := Generate(root, target.Proto)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s is stale: run make generate", target.Out)
			}
		})
	}
}

func TestGenerateReportsABadProto(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, importRoot), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := []byte("syntax = \"proto3\";\npackage x;\nmessage M { string a = 1; string b = 1; }\n")
	if err := os.WriteFile(filepath.Join(dir, importRoot, "bad.proto"), bad, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(dir, "bad.proto"); err == nil {
		t.Fatal("a field number used twice compiled without error")
	}
}
