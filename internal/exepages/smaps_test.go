package exepages

import (
	"strings"
	"testing"
)

// smapsSample is the shape of /proc/self/smaps for a Go binary: its text and
// read-only data, its data with copied pages, an anonymous heap mapping,
// and a shared library's segments; most fields are cut.
const smapsSample = `00400000-02512000 r-xp 00000000 fd:01 1311 /usr/local/bin/pilot
Size:              34888 kB
Rss:               19200 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw sd
02512000-04f9a000 r--p 02112000 fd:01 1311 /usr/local/bin/pilot
Rss:               24000 kB
Anonymous:             0 kB
04f9a000-0501b000 rw-p 04b9a000 fd:01 1311 /usr/local/bin/pilot
Rss:                 500 kB
Anonymous:           120 kB
0501b000-05080000 rw-p 00000000 00:00 0
Rss:                 300 kB
Anonymous:           300 kB
7f0000000000-7f0000001000 r--p 00000000 fd:01 2222 /usr/lib/libc.so.6
Rss:                   4 kB
Anonymous:             0 kB
7f0000001000-7f0000002000 r-xp 00001000 fd:01 2222 /usr/lib/libc.so.6
Rss:                   4 kB
Anonymous:             0 kB
`

func TestImageSegments(t *testing.T) {
	for _, tc := range []struct {
		name  string
		smaps string
		pc    uintptr
		want  []string // start-end of the segments returned
		err   string
	}{
		{"the executable's read-only segments", smapsSample, 0x1000000, []string{"400000-2512000", "2512000-4f9a000"}, ""},
		{"found from its read-only data too", smapsSample, 0x3000000, []string{"400000-2512000", "2512000-4f9a000"}, ""},
		{"another file's", smapsSample, 0x7f0000001800, []string{"7f0000000000-7f0000001000", "7f0000001000-7f0000002000"}, ""},
		{"a replaced binary, matched by device and inode", strings.ReplaceAll(smapsSample, "pilot\n", "pilot (deleted)\n"), 0x1000000,
			[]string{"400000-2512000", "2512000-4f9a000"}, ""},
		{"a segment with copied pages is left alone", strings.Replace(smapsSample, "Anonymous:             0 kB", "Anonymous:             8 kB", 1), 0x1000000,
			[]string{"2512000-4f9a000"}, ""},
		{"an address in anonymous memory", smapsSample, 0x05020000, nil, "no file mapping"},
		{"an address mapped nowhere", smapsSample, 0x10, nil, "no file mapping"},
		{"a field before any mapping", "Rss: 4 kB\n", 0, nil, "before the first mapping"},
		{"a malformed size", "00400000-02512000 r-xp 00000000 fd:01 1311 /p\nRss: many kB\n", 0x400000, nil, "malformed"},
		{"a malformed range", "00400000+02512000 r-xp 00000000 fd:01 1311 /p\n", 0x400000, nil, "malformed range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			segs, err := imageSegments(strings.NewReader(tc.smaps), tc.pc)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range segs {
				got = append(got, s.String())
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("segments %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseSmapsSizes(t *testing.T) {
	segs, err := parseSmaps(strings.NewReader(smapsSample))
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 6 {
		t.Fatalf("%d mappings, want 6", len(segs))
	}
	if text := segs[0]; text.rss != 19200<<10 || text.anonymous != 0 || text.writable || text.file != "fd:01 1311" {
		t.Errorf("text segment parsed as %+v", text)
	}
	if data := segs[2]; data.anonymous != 120<<10 || !data.writable {
		t.Errorf("data segment parsed as %+v", data)
	}
	if heap := segs[3]; heap.file != "" {
		t.Errorf("anonymous mapping has file %q", heap.file)
	}
}
