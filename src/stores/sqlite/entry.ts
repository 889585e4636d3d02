/** model-gateway/sqlite: every store in one SQLite file (better-sqlite3), for one durable process. */
export { createSqliteStores, SqliteStoreError, type SqliteStoreOptions } from './index.js';
