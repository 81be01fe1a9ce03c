// needs: postgres
// The pieces every service on PostgreSQL shares, on a real server: schema
// names checked, migrations applied once when replicas race, a transaction
// rolled back on a throw, and a LISTEN connection that comes back by itself
// after the server drops it.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import net from "node:net";
import { after, describe, it } from "node:test";
import pg from "pg";
import {
  channelName,
  checkSchemaName,
  createSchemaPool,
  jsonbText,
  NotificationListener,
  runMigrations,
  withTransaction,
  type Migration,
} from "@oz0/postgres";

const url = process.env.DATABASE_URL ?? "";
const schemas: string[] = [];
function freshSchema(): string {
  const schema = `oz0_lib_${randomBytes(6).toString("hex")}`;
  schemas.push(schema);
  return schema;
}

/** `fn` with a fresh schema and a pool on it, ended afterwards. */
async function withSchemaPool(fn: (schema: string, pool: pg.Pool) => Promise<void>): Promise<void> {
  const schema = freshSchema();
  const pool = createSchemaPool({ connectionString: url, schema });
  try {
    await fn(schema, pool);
  } finally {
    await pool.end();
  }
}

async function admin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

after(async () => {
  await admin(async (client) => {
    for (const schema of schemas) await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  });
});

async function waitFor(check: () => Promise<boolean>): Promise<void> {
  for (const deadline = Date.now() + 30_000; !(await check());) {
    if (Date.now() > deadline) throw new Error("waited 30 s for the condition");
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

/** Until things_by_colour's build waits on a lock (a transaction it must outlast). */
async function buildWaiting(pool: pg.Pool): Promise<void> {
  await waitFor(async () => {
    const building = await pool.query(
      "SELECT 1 FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX%things_by_colour%' AND wait_event_type = 'Lock'",
    );
    return building.rowCount === 1;
  });
}

async function until(check: () => boolean): Promise<void> {
  while (!check()) await new Promise((resolve) => setTimeout(resolve, 20));
}

/**
 * A TCP proxy to the server whose connections can be made to go silent: bytes
 * stop flowing both ways but neither side gets a FIN or an RST, as when the
 * peer's node fails or a NAT forgets the mapping.
 */
async function silenceableProxy(target: URL): Promise<{
  url: string;
  accepted: () => number;
  silence: (what: { current: boolean; new: boolean }) => void;
  close: () => void;
}> {
  const sockets: net.Socket[] = [];
  const forwarding: [net.Socket, net.Socket][] = [];
  let [accepted, silenceNew] = [0, false];
  const proxy = net.createServer((client) => {
    accepted++;
    sockets.push(client);
    client.on("error", () => undefined);
    // Accepted but never read from nor forwarded: the server never answers.
    if (silenceNew) return;
    const server = net.connect(Number(target.port || 5432), target.hostname);
    sockets.push(server);
    server.on("error", () => undefined);
    client.pipe(server);
    server.pipe(client);
    forwarding.push([client, server]);
  });
  await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  const via = new URL(target);
  via.hostname = "127.0.0.1";
  via.port = String((proxy.address() as net.AddressInfo).port);
  return {
    url: via.toString(),
    accepted: () => accepted,
    silence: (what) => {
      silenceNew = what.new;
      if (!what.current) return;
      for (const [client, server] of forwarding.splice(0)) {
        client.unpipe(server);
        server.unpipe(client);
        client.pause();
        server.pause();
      }
    },
    close: () => {
      proxy.close();
      for (const socket of sockets) socket.destroy();
    },
  };
}

const MIGRATIONS: Migration[] = [
  { version: 2, name: "a column", sql: "ALTER TABLE things ADD COLUMN colour text" },
  { version: 1, name: "things", sql: "CREATE TABLE things (id integer PRIMARY KEY)" },
];
/** Version 3: an index built concurrently. */
const BY_COLOUR: Migration = {
  version: 3,
  name: "things by colour",
  concurrentIndex: { name: "things_by_colour", table: "things", columns: ["colour"] },
};

void describe("@oz0/postgres", () => {
  void it("refuses a schema name that is not a plain identifier, and fits long ones into a channel name", () => {
    for (const bad of ["Oz0", "oz0; DROP TABLE x", "0oz", "a-b", "x".repeat(64), ""])
      assert.throws(() => checkSchemaName(bad), /lower-case letters, digits and underscores/);
    assert.equal(channelName("oz0", "cluster"), "oz0_cluster");
    const long = channelName("s".repeat(60), "cluster");
    assert.match(long, /^oz0_cluster_[0-9a-f]{32}$/);
    assert.notEqual(long, channelName(`${"s".repeat(59)}t`, "cluster"), "different schemas, different channels");
  });

  void it("applies each migration once, in version order, when five replicas start at once", async () => {
    assert.ok(url, "DATABASE_URL must point at a server (npm test starts one)");
    const schema = freshSchema();
    const pools = Array.from({ length: 5 }, () =>
      createSchemaPool({ connectionString: url, schema, maxConnections: 1 }),
    );
    // An index built concurrently among them: it waits for every transaction older than its own, so a replica
    // waiting for the lock inside one would deadlock it.
    const migrations: Migration[] = [
      ...MIGRATIONS,
      { version: 4, name: "a size", sql: "ALTER TABLE things ADD COLUMN size integer" },
      BY_COLOUR,
    ];
    try {
      // Every pool holds an open connection first, so the migrations start as close together as they can.
      await Promise.all(pools.map((pool) => pool.query("SELECT 1")));
      const ran = await Promise.all(
        pools.map((pool) => runMigrations({ pool, schema, component: "test", migrations })),
      );
      assert.deepEqual(ran.flat().sort(), [1, 2, 3, 4], `each version applied once: ${JSON.stringify(ran)}`);
      assert.deepEqual(
        ran.find((r) => r.length > 0),
        [1, 2, 3, 4],
        "in version order",
      );
      assert.deepEqual(
        await runMigrations({ pool: pools[0]!, schema, component: "test", migrations }),
        [],
        "a no-op once applied",
      );
      // Unqualified names resolve in the schema, and the later migrations' columns are there.
      await pools[1]!.query("INSERT INTO things (id, colour, size) VALUES (1, 'blue', 3)");
      const recorded = await pools[2]!.query<{ version: number; name: string }>(
        "SELECT version, name FROM oz0_migrations WHERE component = 'test' ORDER BY version",
      );
      assert.deepEqual(recorded.rows, [
        { version: 1, name: "things" },
        { version: 2, name: "a column" },
        { version: 3, name: "things by colour" },
        { version: 4, name: "a size" },
      ]);
    } finally {
      await Promise.all(pools.map((pool) => pool.end()));
    }
  });

  void it("lets two components migrate one fresh schema at once, each applying its own migrations once", async () => {
    // Components may share a schema and start together: both find it missing, and both find
    // `oz0_migrations` missing.
    const schema = freshSchema();
    const components = {
      alpha: [{ version: 1, name: "alpha things", sql: "CREATE TABLE alpha_things (id integer PRIMARY KEY)" }],
      beta: [
        { version: 1, name: "beta things", sql: "CREATE TABLE beta_things (id integer PRIMARY KEY)" },
        { version: 2, name: "a beta column", sql: "ALTER TABLE beta_things ADD COLUMN colour text" },
      ],
    } satisfies Record<string, Migration[]>;
    const racers = Array.from({ length: 8 }, (_, i) => ({
      component: i % 2 === 0 ? "alpha" : "beta",
      pool: createSchemaPool({ connectionString: url, schema, maxConnections: 1 }),
    })) as { component: keyof typeof components; pool: pg.Pool }[];
    try {
      // Every pool holds an open connection first, so the migrations start as close together as they can.
      await Promise.all(racers.map(({ pool }) => pool.query("SELECT 1")));
      const ran = await Promise.all(
        racers.map(({ component, pool }) =>
          runMigrations({ pool, schema, component, migrations: components[component] }),
        ),
      );
      for (const component of ["alpha", "beta"] as const) {
        const mine = ran.filter((_, i) => racers[i]!.component === component);
        assert.deepEqual(
          mine.flat().sort(),
          components[component].map((m) => m.version),
          `${component}'s versions applied once: ${JSON.stringify(mine)}`,
        );
      }
      const recorded = await racers[0]!.pool.query<{ component: string; version: number }>(
        "SELECT component, version FROM oz0_migrations ORDER BY component, version",
      );
      assert.deepEqual(recorded.rows, [
        { component: "alpha", version: 1 },
        { component: "beta", version: 1 },
        { component: "beta", version: 2 },
      ]);
      await racers[1]!.pool.query(
        "INSERT INTO alpha_things (id) VALUES (1); INSERT INTO beta_things (id, colour) VALUES (1, 'blue')",
      );
    } finally {
      await Promise.all(racers.map(({ pool }) => pool.end()));
    }
  });

  void it("builds an index concurrently: writes to the table go on while it waits and builds", async () => {
    const schema = freshSchema();
    const pool = createSchemaPool({ connectionString: url, schema });
    const writer = new pg.Client({ connectionString: url });
    const index: Migration = {
      version: 3,
      name: "things by colour",
      concurrentIndex: { name: "things_by_colour", table: "things", columns: ["colour", "id"] },
    };
    try {
      await runMigrations({ pool, schema, component: "test", migrations: MIGRATIONS });
      // A write in flight when the migration starts: a plain CREATE INDEX would wait for it holding a lock every
      // later write to the table queues behind, until it commits.
      await writer.connect();
      await writer.query(`BEGIN; INSERT INTO ${schema}.things (id, colour) VALUES (1, 'red')`);
      const migrating = runMigrations({ pool, schema, component: "test", migrations: [...MIGRATIONS, index] });
      await buildWaiting(pool);
      // Another replica's write goes through while the build waits.
      await admin(async (client) => {
        await client.query("SET statement_timeout = '5s'");
        await client.query(`INSERT INTO ${schema}.things (id, colour) VALUES (2, 'blue')`);
      });
      await writer.query("COMMIT");
      assert.deepEqual(await migrating, [3]);
      const built = await pool.query<{ valid: boolean; definition: string }>(
        "SELECT i.indisvalid AS valid, pg_get_indexdef(i.indexrelid) AS definition FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'things_by_colour'",
        [schema],
      );
      assert.equal(built.rows.length, 1);
      assert.equal(built.rows[0]!.valid, true);
      assert.match(built.rows[0]!.definition, /ON \w+\.things USING btree \(colour, id\)$/);
      const recorded = await pool.query("SELECT name FROM oz0_migrations WHERE component = 'test' AND version = 3");
      assert.deepEqual(recorded.rows, [{ name: "things by colour" }]);
    } finally {
      await writer.end();
      await pool.end();
    }
  });

  void it("builds again an index a failed concurrent build left invalid, and keeps one left valid", async () => {
    await withSchemaPool(async (schema, pool) => {
      const byId: Migration = {
        version: 4,
        name: "things by id",
        concurrentIndex: { name: "things_by_id", table: "things", columns: ["id"] },
      };
      const indexes = async () =>
        (
          await pool.query<{ name: string; valid: boolean; unique: boolean; oid: number }>(
            "SELECT c.relname AS name, i.indisvalid AS valid, i.indisunique AS unique, c.oid::int AS oid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname LIKE 'things_by_%' ORDER BY 1",
            [schema],
          )
        ).rows;
      await runMigrations({ pool, schema, component: "test", migrations: MIGRATIONS });
      await pool.query("INSERT INTO things (id, colour) VALUES (1, 'red'), (2, 'red')");
      // A concurrent build that fails leaves its index behind, invalid, as one cancelled, aborted as a deadlock's
      // victim, or cut by a server crash does.
      await assert.rejects(
        pool.query("CREATE UNIQUE INDEX CONCURRENTLY things_by_colour ON things (colour)"),
        /could not create unique index/,
      );
      // A replica killed after its build and before the version's record leaves it valid.
      await pool.query("CREATE INDEX CONCURRENTLY things_by_id ON things (id)");
      const before = await indexes();
      assert.deepEqual(
        before.map(({ oid: _, ...rest }) => rest),
        [
          { name: "things_by_colour", valid: false, unique: true },
          { name: "things_by_id", valid: true, unique: false },
        ],
      );
      assert.deepEqual(
        await runMigrations({ pool, schema, component: "test", migrations: [...MIGRATIONS, BY_COLOUR, byId] }),
        [3, 4],
      );
      const after = await indexes();
      assert.deepEqual(
        after.map(({ oid: _, ...rest }) => rest),
        [
          { name: "things_by_colour", valid: true, unique: false },
          { name: "things_by_id", valid: true, unique: false },
        ],
      );
      assert.notEqual(after[0]!.oid, before[0]!.oid, "the invalid one was built again");
      assert.equal(after[1]!.oid, before[1]!.oid, "the valid one was kept, not built again");
    });
  });

  void it("refuses to take another index of the same name for the one a migration builds", async () => {
    await withSchemaPool(async (schema, pool) => {
      await runMigrations({ pool, schema, component: "test", migrations: MIGRATIONS });
      await pool.query("CREATE INDEX things_by_colour ON things (id)");
      await assert.rejects(
        runMigrations({ pool, schema, component: "test", migrations: [...MIGRATIONS, BY_COLOUR] }),
        /migration 3 \(things by colour\): schema \w+ has an index things_by_colour that is not the one this migration builds \(on things \(colour\)\): CREATE INDEX things_by_colour ON \w+\.things USING btree \(id\); drop or rename it, then start again/,
      );
      const recorded = await pool.query("SELECT 1 FROM oz0_migrations WHERE component = 'test' AND version = 3");
      assert.equal(recorded.rowCount, 0);
    });
  });

  void it("builds again when a replica of an older version, waiting for the lock inside a transaction, deadlocks the build", async () => {
    // Runners before this one waited for the lock with pg_advisory_xact_lock, holding a snapshot the build waits
    // for: PostgreSQL aborts one of the two. The old replica's wait begins first, so its one deadlock check (after
    // deadlock_timeout) finds no cycle yet; the build's finds it, and the build is the victim.
    const schema = freshSchema();
    const pool = createSchemaPool({ connectionString: url, schema });
    const writer = new pg.Client({ connectionString: url });
    const oldReplica = new pg.Client({ connectionString: url });
    try {
      await runMigrations({ pool, schema, component: "test", migrations: MIGRATIONS });
      await Promise.all([writer.connect(), oldReplica.connect()]);
      const deadlockTimeoutMs = Number(
        (
          await oldReplica.query<{ ms: string }>(
            "SELECT setting AS ms FROM pg_settings WHERE name = 'deadlock_timeout'",
          )
        ).rows[0]!.ms,
      );
      // The build waits for this write first, long enough for the old replica to line up behind the lock.
      await writer.query(`BEGIN; INSERT INTO ${schema}.things (id, colour) VALUES (1, 'red')`);
      const migrating = runMigrations({ pool, schema, component: "test", migrations: [...MIGRATIONS, BY_COLOUR] });
      await buildWaiting(pool);
      await oldReplica.query("BEGIN");
      const oldPid = (await oldReplica.query<{ pid: number }>("SELECT pg_backend_pid() AS pid")).rows[0]!.pid;
      const oldTurn = oldReplica.query("SELECT pg_advisory_xact_lock(hashtext($1))", [`oz0.migrations:${schema}:test`]);
      await waitFor(async () => {
        const waiting = await pool.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND wait_event = 'advisory'", [
          oldPid,
        ]);
        return waiting.rowCount === 1;
      });
      await new Promise((resolve) => setTimeout(resolve, deadlockTimeoutMs * 2));
      await writer.query("COMMIT");
      // The old replica gets the lock once the aborted build lets it go: it finds nothing it knows to do, and ends.
      await oldTurn;
      await oldReplica.query("COMMIT");
      assert.deepEqual(await migrating, [3]);
      const built = await pool.query<{ valid: boolean }>(
        "SELECT i.indisvalid AS valid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = 'things_by_colour'",
        [schema],
      );
      assert.deepEqual(built.rows, [{ valid: true }]);
    } finally {
      await writer.end();
      await oldReplica.end();
      await pool.end();
    }
  });

  void it("refuses an index whose names are not plain identifiers before touching the schema", async () => {
    await withSchemaPool(async (schema, pool) => {
      const bad: Migration = {
        version: 3,
        name: "a bad index",
        concurrentIndex: { name: "things_by_colour", table: "things; DROP TABLE things", columns: ["colour"] },
      };
      await assert.rejects(
        runMigrations({ pool, schema, component: "test", migrations: [...MIGRATIONS, bad] }),
        /migration 3 \(a bad index\): an index's name, table and columns .* must be lower-case letters/,
      );
      const created = await pool.query("SELECT 1 FROM pg_namespace WHERE nspname = $1", [schema]);
      assert.equal(created.rowCount, 0, "nothing applied");
    });
  });

  void it("says to give a component a schema of its own when another component's table took a name it makes", async () => {
    // The orchestrator and the LLM proxy both make `session_tokens`.
    await withSchemaPool(async (schema, pool) => {
      const tokens = (component: string): Migration[] => [
        { version: 1, name: `${component}'s tokens`, sql: "CREATE TABLE session_tokens (id text PRIMARY KEY)" },
      ];
      await runMigrations({ pool, schema, component: "orchestrator", migrations: tokens("orchestrator") });
      await assert.rejects(
        runMigrations({ pool, schema, component: "llm-proxy", migrations: tokens("llm-proxy") }),
        new RegExp(
          `^Error: migration 1 \\(llm-proxy's tokens\\) of llm-proxy failed in schema ${schema}: relation "session_tokens" already exists; the schema holds the tables of orchestrator as well, whose names may be the same: give llm-proxy a schema of its own \\(OZ0_DATABASE_SCHEMA\\)$`,
        ),
      );
    });
  });

  void it("commits a transaction that resolves and rolls back one that throws", async () => {
    await withSchemaPool(async (schema, pool) => {
      await runMigrations({ pool, schema, component: "test", migrations: MIGRATIONS });
      await withTransaction(pool, (client) => client.query("INSERT INTO things (id) VALUES (1)"));
      await assert.rejects(
        withTransaction(pool, async (client) => {
          await client.query("INSERT INTO things (id) VALUES (2)");
          throw new Error("changed my mind");
        }),
        /changed my mind/,
      );
      assert.deepEqual((await pool.query<{ id: number }>("SELECT id FROM things ORDER BY id")).rows, [{ id: 1 }]);
    });
  });

  void it("stores U+0000, which PostgreSQL's text and jsonb refuse, and a lone surrogate, which jsonb refuses, as U+FFFD", async () => {
    const schema = freshSchema();
    const pool = createSchemaPool({ connectionString: url, schema });
    try {
      await pool.query(`CREATE SCHEMA ${schema}`);
      await pool.query("CREATE TABLE t (id int PRIMARY KEY, body text, tags text[], doc jsonb)");
      // A command's output as a harness reports it, with a NUL from a binary file in it.
      const output = "ELF\u0000\u0000bin";
      // And a text cut in the middle of an emoji (a lone surrogate), beside a whole one.
      const doc = { stdout: output, literal: "\\u0000 is how JSON writes it", cut: "\ud83d|😀" };
      await pool.query("INSERT INTO t VALUES ($1, $2, $3, $4)", [
        1,
        output,
        [output, "plain"],
        jsonbText(JSON.stringify(doc)),
      ]);
      await pool.query({ text: "INSERT INTO t (id, body) VALUES ($1, $2)", values: [2, output] });
      const client = await pool.connect();
      try {
        await client.query("UPDATE t SET body = $1 || body WHERE id = 2", ["\u0000"]);
      } finally {
        client.release();
      }
      const rows = (await pool.query("SELECT id, body, tags, doc FROM t ORDER BY id")).rows;
      assert.deepEqual(rows[0], {
        id: 1,
        body: "ELF\uFFFD\uFFFDbin",
        tags: ["ELF\uFFFD\uFFFDbin", "plain"],
        // The text "\u0000" (an escaped backslash, then u0000) is not a NUL, and stays as written.
        doc: { stdout: "ELF\uFFFD\uFFFDbin", literal: "\\u0000 is how JSON writes it", cut: "\uFFFD|😀" },
      });
      assert.equal(rows[1].body, "\uFFFDELF\uFFFD\uFFFDbin");
      // Without the replacement the server refuses both, as it would refuse the write of a job's event.
      await assert.rejects(
        admin((c) => c.query("SELECT $1::text", ["a\u0000b"])),
        /invalid byte sequence for encoding "UTF8": 0x00/,
      );
      await assert.rejects(
        admin((c) => c.query("SELECT $1::jsonb", [JSON.stringify("a\u0000b")])),
        /unsupported Unicode escape sequence/,
      );
      await assert.rejects(
        admin((c) => c.query("SELECT $1::jsonb", [JSON.stringify("a\ud83d")])),
        /invalid input syntax for type json/,
      );
    } finally {
      await pool.end();
    }
  });

  void it("hears notices on its channel, says when the server dropped it, and hears them again once it is back", async () => {
    const channel = channelName(freshSchema(), "test");
    const heard: string[] = [];
    const happened: string[] = [];
    const errors: unknown[] = [];
    const listener = new NotificationListener({
      connectionString: url,
      channel,
      onNotification: (payload) => heard.push(payload),
      onError: (error) => errors.push(error),
      onLost: () => happened.push("lost"),
      onReconnect: () => happened.push("back"),
    });
    try {
      await listener.start();
      await admin((client) =>
        client.query("SELECT pg_notify($1, 'one'), pg_notify('some_other_channel', 'not mine')", [channel]),
      );
      await until(() => heard.length === 1);
      assert.deepEqual(heard, ["one"]);

      // The server ends the listening connection, as on a restart or a failover.
      const ended = await admin((client) =>
        client.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query = $1", [`LISTEN ${channel}`]),
      );
      assert.equal(ended.rowCount, 1, "the listener's own connection was found");
      await until(() => happened.includes("back"));
      assert.deepEqual(happened, ["lost", "back"]);
      assert.ok(errors.length >= 1, "the loss is reported");

      await admin((client) => client.query("SELECT pg_notify($1, 'two')", [channel]));
      await until(() => heard.length === 2);
      assert.deepEqual(heard, ["one", "two"]);
    } finally {
      await listener.close();
    }
    // Closed: no more notices, and no reconnecting.
    await admin((client) => client.query("SELECT pg_notify($1, 'three')", [channel]));
    await new Promise((resolve) => setTimeout(resolve, 200));
    assert.deepEqual(heard, ["one", "two"]);
  });

  void it("notices a connection gone silent (no FIN, no RST), replaces it, and hears notices again", async () => {
    const channel = channelName(freshSchema(), "test");
    const proxy = await silenceableProxy(new URL(url));
    const heard: string[] = [];
    const happened: string[] = [];
    const errors: unknown[] = [];
    const listener = new NotificationListener({
      connectionString: proxy.url,
      channel,
      onNotification: (payload) => heard.push(payload),
      onError: (error) => errors.push(error),
      onLost: () => happened.push("lost"),
      onReconnect: () => happened.push("back"),
      // Checked often, so the test waits little; the timeout stays generous so a busy machine is not taken for a dead server.
      livenessIntervalMs: 50,
      livenessTimeoutMs: 2_000,
    });
    try {
      await listener.start();
      await admin((client) => client.query("SELECT pg_notify($1, 'one')", [channel]));
      await until(() => heard.length === 1);

      // The listening connection goes silent, and so does the first connection opened to replace it.
      const accepted = proxy.accepted();
      const [lostBefore, errorsBefore] = [happened.length, errors.length];
      proxy.silence({ current: true, new: true });
      await until(() => happened.length > lostBefore);
      assert.equal(happened[lostBefore], "lost", "the unanswered liveness check counts as a loss");
      assert.match(String(errors[errorsBefore]), /liveness check: no answer from PostgreSQL within 2000 ms/);
      // The new connection never answers either: it is given up and tried again.
      await until(() => proxy.accepted() > accepted && errors.length > errorsBefore + 1);
      proxy.silence({ current: false, new: false });
      await until(() => happened.slice(lostBefore).includes("back"));
      assert.deepEqual(happened.slice(lostBefore), ["lost", "back"]);

      await admin((client) => client.query("SELECT pg_notify($1, 'two')", [channel]));
      await until(() => heard.length === 2);
      assert.deepEqual(heard, ["one", "two"]);

      // Closing does not wait on a connection that went silent.
      proxy.silence({ current: true, new: true });
    } finally {
      await listener.close();
      proxy.close();
    }
  });

  void it("closed while its connection opens, it leaves no LISTEN connection behind, and a failed start can be retried", async () => {
    const channel = channelName(freshSchema(), "test");
    const heard: string[] = [];
    const listener = new NotificationListener({
      connectionString: url,
      channel,
      onNotification: (payload) => heard.push(payload),
    });
    const starting = listener.start();
    await listener.close();
    await starting;
    const listening = async (): Promise<number> =>
      (
        await admin((client) =>
          client.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE query = $1", [`LISTEN ${channel}`]),
        )
      ).rows[0].n as number;
    // The server may take a moment to drop the ended connection from its view.
    for (let i = 0; i < 100 && (await listening()) > 0; i++) await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(await listening(), 0, "no connection listens for a closed listener");
    await admin((client) => client.query("SELECT pg_notify($1, 'after close')", [channel]));
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.deepEqual(heard, []);

    const unreachable = new NotificationListener({
      connectionString: "postgres://nobody@127.0.0.1:1/none",
      channel,
      onNotification: () => undefined,
    });
    await assert.rejects(unreachable.start());
    await assert.rejects(unreachable.start(), "a second start tries again rather than returning as if listening");
    await unreachable.close();
  });
});
