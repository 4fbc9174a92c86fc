package exepages

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// segment is one mapping, as /proc/self/smaps shows it.
type segment struct {
	start, end uintptr
	rss        int64 // resident bytes
	anonymous  int64 // bytes copied on write, no longer the file's
	writable   bool
	file       string // "device inode"
}

func (s segment) String() string { return fmt.Sprintf("%x-%x", s.start, s.end) }

// imageSegments reads smaps (proc_pid_smaps(5)) and returns the read-only,
// unmodified segments of the file whose mapping holds pc.
func imageSegments(smaps io.Reader, pc uintptr) ([]segment, error) {
	all, err := parseSmaps(smaps)
	if err != nil {
		return nil, err
	}
	image := ""
	for _, s := range all {
		if s.start <= pc && pc < s.end && s.file != "" {
			image = s.file
			break
		}
	}
	if image == "" {
		return nil, fmt.Errorf("smaps: no file mapping holds address %#x", pc)
	}
	var segs []segment
	for _, s := range all {
		if s.file == image && !s.writable && s.anonymous == 0 {
			segs = append(segs, s)
		}
	}
	return segs, nil
}

// parseSmaps reads each mapping's header line ("start-end perms offset
// dev inode [path]") and its Rss and Anonymous fields.
func parseSmaps(r io.Reader) ([]segment, error) {
	var (
		segs []segment
		cur  *segment
	)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		// A field is "Name: value"; a mapping's header has spaces and a
		// dash before its first colon (in the device).
		key, value, found := strings.Cut(line, ":")
		if found && !strings.ContainsAny(key, " -") {
			if cur == nil {
				return nil, fmt.Errorf("smaps: field before the first mapping: %q", line)
			}
			ok := true
			switch key {
			case "Rss":
				cur.rss, ok = kiloBytes(value)
			case "Anonymous":
				cur.anonymous, ok = kiloBytes(value)
			}
			if !ok {
				return nil, fmt.Errorf("smaps: malformed %q", line)
			}
			continue
		}
		s, err := parseHeader(line)
		if err != nil {
			return nil, err
		}
		segs = append(segs, s)
		cur = &segs[len(segs)-1]
	}
	return segs, sc.Err()
}

func parseHeader(line string) (segment, error) {
	f := strings.Fields(line)
	if len(f) < 5 || len(f[1]) != 4 {
		return segment{}, fmt.Errorf("smaps: malformed mapping %q", line)
	}
	lo, hi, _ := strings.Cut(f[0], "-")
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil || end < start {
		return segment{}, fmt.Errorf("smaps: malformed range in %q", line)
	}
	s := segment{start: uintptr(start), end: uintptr(end), writable: f[1][1] == 'w'}
	if f[4] != "0" { // inode 0: anonymous memory, the heap, the stack, vdso
		s.file = f[3] + " " + f[4]
	}
	return s, nil
}

// kiloBytes parses "   1234 kB".
func kiloBytes(v string) (int64, bool) {
	n, unit, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || unit != "kB" {
		return 0, false
	}
	k, err := strconv.ParseInt(n, 10, 64)
	return k << 10, err == nil
}
