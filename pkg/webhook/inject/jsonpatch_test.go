package inject

import (
	"encoding/json"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
)

func TestCreatePatch(t *testing.T) {
	tests := []struct {
		name     string
		from, to string
		// ops is how many operations the patch may hold at most: small
		// patches, not whole-document replacements.
		ops int
	}{
		{name: "equal", from: `{"a":1,"b":[1,2]}`, to: `{"a":1,"b":[1,2]}`, ops: 0},
		{name: "add key", from: `{"a":1}`, to: `{"a":1,"b":{"c":null}}`, ops: 1},
		{name: "remove key", from: `{"a":1,"b":2}`, to: `{"a":1}`, ops: 1},
		{name: "replace scalar with null", from: `{"a":1}`, to: `{"a":null}`, ops: 1},
		{name: "escaped keys", from: `{"m":{"x/y":1}}`, to: `{"m":{"x/y":2,"a~b":3}}`, ops: 2},
		{name: "append", from: `{"l":[1,2]}`, to: `{"l":[1,2,3,4]}`, ops: 2},
		{name: "prepend", from: `{"l":[1,2]}`, to: `{"l":[0,1,2]}`, ops: 1},
		{name: "insert middle", from: `{"l":[1,3]}`, to: `{"l":[1,2,3]}`, ops: 1},
		{name: "remove middle", from: `{"l":[1,2,3,4]}`, to: `{"l":[1,4]}`, ops: 2},
		{name: "same length change", from: `{"l":[{"n":"a","v":1},{"n":"b"}]}`, to: `{"l":[{"n":"a","v":2},{"n":"b"}]}`, ops: 1},
		{name: "different length rewrite", from: `{"l":[1,2,3]}`, to: `{"l":[4,5]}`, ops: 1},
		{name: "type change", from: `{"a":{"b":1}}`, to: `{"a":[1]}`, ops: 1},
		{name: "nested container added", from: `{"spec":{"containers":[{"name":"app"}]}}`,
			to: `{"spec":{"containers":[{"name":"app"},{"name":"istio-proxy","env":[{"name":"A","value":"1"}]}],"volumes":[{"name":"v"}]}}`, ops: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			patch, err := createPatch([]byte(tt.from), []byte(tt.to))
			if err != nil {
				t.Fatal(err)
			}
			var ops []patchOp
			if err := json.Unmarshal(patch, &ops); err != nil {
				t.Fatal(err)
			}
			if len(ops) > tt.ops {
				t.Errorf("%d operations, want at most %d: %s", len(ops), tt.ops, patch)
			}
			decoded, err := jsonpatch.DecodePatch(patch)
			if err != nil {
				t.Fatalf("decode %s: %v", patch, err)
			}
			got, err := decoded.Apply([]byte(tt.from))
			if err != nil {
				t.Fatalf("apply %s: %v", patch, err)
			}
			if !jsonpatch.Equal(got, []byte(tt.to)) {
				t.Fatalf("patch %s turns %s into %s, want %s", patch, tt.from, got, tt.to)
			}
		})
	}
}
