package tags

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteTable prints tags as a table with the columns TAG, REVISION and
// NAMESPACES (comma-separated; <none> when no namespace uses the tag).
func WriteTable(w io.Writer, infos []TagInfo) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "TAG\tREVISION\tNAMESPACES")
	for _, t := range infos {
		namespaces := "<none>"
		if len(t.Namespaces) > 0 {
			namespaces = strings.Join(t.Namespaces, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Tag, t.Revision, namespaces)
	}
	return tw.Flush()
}
