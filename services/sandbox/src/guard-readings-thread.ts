// The guards' thread (guard-readings.ts): runs each reading it is sent and
// answers with its result, one at a time.
import { parentPort } from "node:worker_threads";
import type { GuardReadingReply, GuardReadingTask } from "./guard-readings.js";
import { heldDeletedFiles } from "./held-deleted-files.js";
import { sessionsOverMemory } from "./session-memory-guard.js";
import { entriesByUid } from "./shared-place-entries.js";
import { sessionsOverOpenFiles, sessionsOverPtys } from "./session-open-files-guard.js";

function run(task: GuardReadingTask): unknown {
  switch (task.kind) {
    case "sessionsOverMemory":
      return sessionsOverMemory(task.input);
    case "sessionsOverOpenFiles":
      return sessionsOverOpenFiles(task.input);
    case "sessionsOverPtys":
      return sessionsOverPtys(task.input);
    case "entriesByUid":
      return entriesByUid(task.input);
    case "heldDeletedFiles":
      return heldDeletedFiles(task.input);
  }
}

parentPort!.on("message", ({ id, task }: { id: number; task: GuardReadingTask }) => {
  let reply: GuardReadingReply;
  try {
    reply = { id, result: run(task) };
  } catch (error) {
    reply = { id, error: error instanceof Error ? error.message : String(error) };
  }
  parentPort!.postMessage(reply);
});
