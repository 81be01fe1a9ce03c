import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { SqliteJobStore } from "../src/store/sqlite-store.js";
import { jobStoreSuite } from "./job-store-suite.js";

jobStoreSuite("sqlite", async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), "oz0-store-"));
  return {
    store: new SqliteJobStore({ file: path.join(dir, "orchestrator.db") }),
    cleanup: async () => rmSync(dir, { recursive: true, force: true }),
  };
});

// Files from before numbered migrations (served tools and the rest): sqlite-schema-upgrade.test.ts.
