package inject

import (
	"strings"
	"testing"
)

func TestTemplateFuncs(t *testing.T) {
	tests := []struct {
		name     string
		template string
		data     map[string]any
		want     string
	}{
		{name: "default of missing", template: `{{ default "x" .missing }}`, want: "x"},
		{name: "default of empty string", template: `{{ default "x" .s }}`, data: map[string]any{"s": ""}, want: "x"},
		{name: "default of false", template: `{{ default true .b }}`, data: map[string]any{"b": false}, want: "true"},
		{name: "default keeps value", template: `{{ default "x" .s }}`, data: map[string]any{"s": "y"}, want: "y"},
		{name: "default keeps zero-less number", template: `{{ default 1 .n }}`, data: map[string]any{"n": 15020.0}, want: "15020"},
		{name: "quote escapes", template: `{{ quote .s }}`, data: map[string]any{"s": "a\"b: c"}, want: `"a\"b: c"`},
		{name: "quote number", template: `{{ quote .n }}`, data: map[string]any{"n": 8080}, want: `"8080"`},
		{name: "indent", template: `{{ indent 2 "a\nb" }}`, want: "  a\n  b"},
		{name: "nindent", template: `x:{{ nindent 2 "a: 1" }}`, want: "x:\n  a: 1"},
		{name: "toYaml", template: `{{ toYaml .m }}`, data: map[string]any{"m": map[string]any{"b": 1, "a": "x"}}, want: "a: x\nb: 1"},
		{name: "toJson", template: `{{ toJson .m }}`, data: map[string]any{"m": map[string]any{"a": []int{1}}}, want: `{"a":[1]}`},
		{name: "dict", template: `{{ toJson (dict "a" 1) }}`, want: `{"a":1}`},
		{name: "isset", template: `{{ isset .m "k" }} {{ isset .m "z" }}`, data: map[string]any{"m": map[string]string{"k": ""}}, want: "true false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := newTemplate("t", tt.template)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			if err := tmpl.Execute(&out, tt.data); err != nil {
				t.Fatal(err)
			}
			if got := strings.ReplaceAll(out.String(), "<no value>", ""); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}
