/** model-gateway/postgres: every store in one PostgreSQL schema, for several durable instances. */
export { createPostgresStores, PostgresStoreError, type PostgresStoreOptions } from './index.js';
