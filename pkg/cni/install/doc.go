// Package install keeps meshpilot's CNI plugin installed on a node, from a
// DaemonSet pod with the node's CNI directories mounted: it copies the
// plugin binary into the CNI bin directory, appends the plugin's entry to
// the primary conflist (the first by name, as the runtime picks it), repairs
// the entry whenever the primary plugin rewrites the file, and on stop
// removes its own entry and binary, leaving everything else as it found it.
package install
