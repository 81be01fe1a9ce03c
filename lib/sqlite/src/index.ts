export {
  runSqliteMigrations,
  type SchemaProbe,
  type SqliteMigration,
  type SqliteMigrationOptions,
} from "./migrations.js";
