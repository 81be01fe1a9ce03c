// The GraphStore suite on SQLite: every store opened on one data directory's graphs.db.
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { SqliteGraphStore } from "../src/store/sqlite-graph-store.js";
import { graphStoreSuite } from "./graph-store-suite.js";

graphStoreSuite("sqlite", async () => {
  const home = mkdtempSync(path.join(os.tmpdir(), "oz0-graph-store-"));
  return {
    open: async () => SqliteGraphStore.open(home),
    cleanup: async () => rmSync(home, { recursive: true, force: true }),
  };
});
