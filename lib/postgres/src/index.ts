// @oz0/postgres: what every Orchestrator Zero service on PostgreSQL shares.
export { channelName, checkSchemaName, createSchemaPool, withTransaction } from "./schema-pool.js";
export type { SchemaPoolOptions } from "./schema-pool.js";
export { jsonbText } from "./nul-replacement.js";
export { runMigrations } from "./migrations.js";
export type { ConcurrentIndexMigration, Migration, SqlMigration } from "./migrations.js";
export { NotificationListener } from "./notification-listener.js";
export type { NotificationListenerOptions } from "./notification-listener.js";
