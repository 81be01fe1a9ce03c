// What only PostgreSQL has, for the stores' transactions: advisory locks,
// and the pg-style client the cluster's row locks and NOTIFY take
// (cluster/lease-manager.ts's assertLeaseHeld, cluster/cluster-notifier.ts),
// made from a Kysely transaction so they run inside it.
import { CompiledQuery, sql, type Transaction } from "kysely";
import type { Tables } from "./sql-database.js";

/** Held until the transaction ends; keyed by text, as replicas have always keyed it (hashtext). */
export async function advisoryXactLock(trx: Transaction<Tables>, key: string): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(hashtext(${key}))`.execute(trx);
}

/** The subset of a pg client the cluster's helpers call. */
export interface SqlClient {
  query<R>(text: string, values?: unknown[]): Promise<{ rows: R[] }>;
}

/** `trx` as a pg-style client: its queries run in the transaction. */
export function transactionClient(trx: Transaction<Tables>): SqlClient {
  return {
    query: async <R>(text: string, values: unknown[] = []) => {
      const result = await trx.executeQuery<R>(CompiledQuery.raw(text, values));
      return { rows: [...result.rows] };
    },
  };
}
