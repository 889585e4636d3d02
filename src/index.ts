export { createGateway } from './gateway.js';
export type { Gateway, GatewayExtras, GatewayOptions, GatewayServerContext } from './gateway.js';
export type { Admin, CreateKeyInput, CreatedKey, KeyView, LedgerQueryInput, TimeInput } from './admin/accounts.js';
export { AdminError } from './admin/accounts.js';
export { GatewayError } from './errors.js';
export type { ErrorCode } from './errors.js';
export { ConfigError, optionsSchema, parseOptions } from './options.js';
export type { GatewayConfig, GatewayConfigInput } from './options.js';
export { loadConfigFile } from './cli/config-file.js';
export { createMemoryStores } from './stores/memory/index.js';
export { createStores } from './stores/from-storage.js';
export type { StorageOptions } from './stores/from-storage.js';
export type * from './stores/types.js';
export { StoreUnavailableError, isStoreUnavailable } from './stores/errors.js';
export type { Logger } from './observability/log.js';
export type {
  GatewayPlugin,
  OnAuthenticatedArgs,
  OnBilledArgs,
  OnErrorArgs,
  OnInputArgs,
  OnOutputArgs,
  OnRequestArgs,
  OnResponseArgs,
  OnUpstreamRequestArgs,
  PluginKey,
} from './pipeline/hooks.js';
export type { UpstreamCall, UpstreamClient, UpstreamResponse } from './upstream/client.js';
export type { AdminHttpOptions } from './admin/http.js';
export { signWebhook } from './alerts/alerts.js';
export type { BudgetAlert } from './alerts/alerts.js';

export { createAdminHandler } from './admin/handler.js';
