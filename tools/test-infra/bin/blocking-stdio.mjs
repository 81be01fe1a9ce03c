// Imported (`--import`) into the test runner's process and, through it, into
// every test file's process: stdout and stderr block until the pipe takes each
// write, so nothing is still queued when the process ends.
// Why: each test file's process sends its results to the runner over its
// stdout, a pipe. With --test-force-exit it calls process.exit() as soon as its
// reporter closes, and on Linux a pipe's writes are queued in the process
// whenever the reader is behind; whatever is queued then is dropped. The
// runner saw the file end at exit code 0 and never heard of its last tests: a
// run lost the tail of a file's results, failures included, without a word
// (nodejs/node#64833). `_handle.setBlocking` is libuv's, and what Node itself
// does for stdio pipes on Windows; a terminal or a file needs nothing.
for (const stream of [process.stdout, process.stderr]) {
  stream._handle?.setBlocking?.(true);
}
