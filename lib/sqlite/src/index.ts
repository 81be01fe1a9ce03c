export {
  DataDirectoryInUseError,
  lockDataDirectory,
  type DataDirectoryLock,
  type DataDirectoryLockOptions,
} from "./data-directory-lock.js";
export {
  runSqliteMigrations,
  type SchemaProbe,
  type SqliteMigration,
  type SqliteMigrationOptions,
} from "./migrations.js";
export { SqliteCheckpointer } from "./sqlite-checkpointer.js";
