// needs: postgres
// The GraphStore suite on a real PostgreSQL server, each test in a schema of
// its own. Each store is another replica's: its own pool, alternately the job
// store's (the schema found from the pool) and one opened with the schema
// named, as openGraphStore is called in either way.
import { openGraphStore } from "../src/graph-store.js";
import { createPostgresPool } from "../src/postgres-migrations.js";
import { PostgresJobStore } from "../src/postgres-store.js";
import { graphStoreSuite } from "./graph-store-suite.js";
import { databaseUrl, dropSchema, freshSchema } from "./postgres-test-support.js";

const connectionString = databaseUrl();

graphStoreSuite("postgres", async () => {
  const schema = freshSchema();
  const closers: (() => Promise<void>)[] = [];
  let opened = 0;
  return {
    open: async () => {
      if (opened++ % 2 === 0) {
        const jobs = await PostgresJobStore.open({ connectionString, schema, maxConnections: 4 });
        closers.push(() => jobs.close());
        return openGraphStore({ pool: jobs.pool, home: "/nonexistent" });
      }
      const pool = createPostgresPool({ connectionString, schema, maxConnections: 4 });
      closers.push(() => pool.end());
      return openGraphStore({ pool, schema, home: "/nonexistent" });
    },
    cleanup: async () => {
      for (const close of closers) await close();
      await dropSchema(schema);
    },
  };
});
