// The SQLite store against the ProxyStore contract (proxy-store-suite.ts).
// One process uses it, so both handles are the same store.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { SqliteProxyStore } from "../src/sqlite-proxy-store.js";
import { describeProxyStore } from "./proxy-store-suite.js";

describeProxyStore("SqliteProxyStore", async () => {
  const store = new SqliteProxyStore({ dataDir: mkdtempSync(path.join(tmpdir(), "oz0-llm-proxy-store-")) });
  return { a: store, b: store, close: () => store.close() };
});
