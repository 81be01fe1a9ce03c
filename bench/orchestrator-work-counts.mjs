// Counts the work an orchestrator does under another bench, by kind rather
// than by time (the counts do not move with the machine's load): SQL
// statements by their text (better-sqlite3), so transactions are the BEGINs,
// and HTTP/2 streams by path, the calls it makes and the calls it serves.
//
//   node bench/orchestrator-work-counts.mjs wrap DIST DIR
//     writes DIR/main.js, which installs the counters and then runs DIST/main.js
//     (DIST: an orchestrator's dist, this checkout's or a copy kept inside it);
//   OZ0_BENCH_ORCHESTRATOR_DIST=DIR node --import tsx bench/control-plane-cost.ts ...
//     the orchestrator writes DIR/counts-<pid>.json when it exits;
//   node bench/orchestrator-work-counts.mjs summary DIR JOBS
//     prints them per job (JOBS: every job the orchestrator ran, warm-up included;
//     its start-up's few statements are counted too).
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { createRequire, syncBuiltinESMExports } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";

/** Called by the wrapper before the orchestrator loads: counts from then until the process exits. */
export function install(dist, outDir) {
  const require = createRequire(path.join(dist, "main.js"));
  const bump = (map, key) => map.set(key, (map.get(key) ?? 0) + 1);
  const statements = new Map();
  const Database = require("better-sqlite3");
  const prepare = Database.prototype.prepare;
  const wrapped = new WeakSet();
  Database.prototype.prepare = function (source) {
    const statement = prepare.call(this, source);
    const proto = Object.getPrototypeOf(statement);
    if (!wrapped.has(proto)) {
      wrapped.add(proto);
      for (const name of ["run", "get", "all", "iterate"]) {
        const original = proto[name];
        proto[name] = function (...args) {
          bump(statements, this.source);
          return original.apply(this, args);
        };
      }
    }
    return statement;
  };
  const http2 = require("node:http2");
  const made = new Map();
  const served = new Map();
  const connect = http2.connect;
  http2.connect = function (...args) {
    const session = connect.apply(this, args);
    const request = session.request;
    session.request = function (headers, ...rest) {
      bump(made, String(headers?.[":path"]));
      return request.call(this, headers, ...rest);
    };
    return session;
  };
  for (const name of ["createServer", "createSecureServer"]) {
    const original = http2[name];
    http2[name] = function (...args) {
      const server = original.apply(this, args);
      server.on("stream", (_stream, headers) => bump(served, String(headers[":path"])));
      return server;
    };
  }
  // The ESM view of node:http2 (import * as http2) sees the wrapped functions too.
  syncBuiltinESMExports();
  process.on("exit", () => {
    writeFileSync(
      path.join(outDir, `counts-${process.pid}.json`),
      JSON.stringify({
        statements: Object.fromEntries(statements),
        made: Object.fromEntries(made),
        served: Object.fromEntries(served),
      }),
    );
  });
}

function summary(dir, jobs) {
  for (const file of readdirSync(dir).filter((f) => /^counts-\d+\.json$/.test(f))) {
    const counts = JSON.parse(readFileSync(path.join(dir, file), "utf8"));
    const rows = Object.entries(counts.statements).sort((a, b) => b[1] - a[1]);
    const all = rows.reduce((sum, [, n]) => sum + n, 0);
    const begins = rows.filter(([sql]) => /^begin/i.test(sql)).reduce((sum, [, n]) => sum + n, 0);
    const per = (n) => (n / jobs).toFixed(2);
    console.log(`${file}: ${per(all)} statements a job (BEGIN and COMMIT included), ${per(begins)} transactions`);
    for (const [sql, n] of rows)
      if (n / jobs >= 0.05) console.log(`  ${per(n)}  ${sql.replace(/\s+/g, " ").slice(0, 140)}`);
    console.log("calls made, a job:");
    for (const [p, n] of Object.entries(counts.made)) console.log(`  ${per(n)}  ${p}`);
    console.log("calls served, a job:");
    for (const [p, n] of Object.entries(counts.served)) console.log(`  ${per(n)}  ${p}`);
  }
}

const [command, ...args] = process.argv.slice(2);
if (command === "wrap") {
  const [dist, dir] = args.map((a) => path.resolve(a));
  mkdirSync(dir, { recursive: true });
  const self = pathToFileURL(import.meta.filename).href;
  writeFileSync(
    path.join(dir, "main.js"),
    `import { install } from ${JSON.stringify(self)};\ninstall(${JSON.stringify(dist)}, ${JSON.stringify(dir)});\nawait import(${JSON.stringify(pathToFileURL(path.join(dist, "main.js")).href)});\n`,
  );
  console.log(`OZ0_BENCH_ORCHESTRATOR_DIST=${dir}`);
} else if (command === "summary") {
  summary(path.resolve(args[0]), Number(args[1]));
} else if (command !== undefined) {
  console.error("usage: orchestrator-work-counts.mjs wrap DIST DIR | summary DIR JOBS");
  process.exit(2);
}
