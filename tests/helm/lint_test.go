package helm

import "testing"

func TestHelmLint(t *testing.T) {
	tl := newTools(t)
	for _, chart := range []string{"base", "pilot"} {
		t.Run(chart, func(t *testing.T) {
			tl.run(t, "", tl.helm, "lint", "--strict", tl.chart(chart))
		})
	}
	t.Run("pilot with a revision and tags", func(t *testing.T) {
		tl.run(t, "", tl.helm, "lint", "--strict", tl.chart("pilot"),
			"--set", "revision=canary", "--set", "revisionTags={prod,default}")
	})
}
