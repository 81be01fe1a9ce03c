// Where a Linux system keeps its programs and their libraries: what a
// session under the sandbox's bubblewrap sees of the host besides a few
// files of /etc, node's folder, the plugin's and its own. The sandbox binds
// them; the conformance kit warns of a harness program outside them (which
// it runs, but a session on the stack would not find). One list for both.

export const SYSTEM_PROGRAM_FOLDERS: readonly string[] = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64"];
