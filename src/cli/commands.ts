/**
 * The CLI's admin commands on accounts, wallets and keys: each is one call of the programmatic
 * admin (the same one the admin API and the console use), its answer printed as JSON. Flags
 * are checked before the storage is opened (`checkFlags`), so a typo never waits on a store.
 */
import { type Admin, AdminError } from '../admin/accounts.js';
import { keyLimitFlags, LimitFlagError } from './limits.js';
import { need, signedUsd, UsageError, usd } from './values.js';

/** The parsed flag values the commands read. */
export interface CommandValues {
  id?: string | undefined;
  account?: string | undefined;
  wallet?: string | undefined;
  usd?: string | undefined;
  reason?: string | undefined;
  kind?: string | undefined;
  model?: string | undefined;
  label?: string | undefined;
  'monthly-cap'?: string | undefined;
  models?: string | undefined;
  tpm?: string | undefined;
  budget?: string[] | undefined;
}

/** The commands this module runs, as "group action". */
export const ADMIN_COMMANDS = [
  'accounts create',
  'accounts list',
  'accounts budgets',
  'wallet show',
  'wallet top-up',
  'wallet adjust',
  'keys create',
  'keys list',
  'keys disable',
  'keys enable',
  'keys limits',
  'keys rotate',
  'keys delete',
] as const;

/** The commands that only read: they never warn that memory storage forgets a change. */
export const READ_ONLY = new Set(['accounts list', 'wallet show', 'keys list']);

/** A monthly cap flag: a USD amount, or "none" to clear it. */
function capFlag(value: string | undefined): string | null | undefined {
  if (value === undefined) return undefined;
  return value === 'none' ? null : usd(value, 'monthly-cap', false);
}

/** Every flag the command reads, checked and converted; a bad one is a UsageError naming it. */
export function checkFlags(command: string, values: CommandValues) {
  let limits: ReturnType<typeof keyLimitFlags>;
  try {
    limits = keyLimitFlags(values);
  } catch (err) {
    if (err instanceof LimitFlagError) throw new UsageError(err.message);
    throw err;
  }
  return {
    wallet: values.wallet === undefined ? '0' : usd(values.wallet, 'wallet', false),
    // wallet top-up adds money; wallet adjust takes a signed amount.
    amount: values.usd === undefined ? undefined : command === 'wallet adjust' ? signedUsd(values.usd, 'usd') : usd(values.usd, 'usd', true),
    cap: capFlag(values['monthly-cap']),
    limits,
  };
}

/** Runs one admin command; returns what to print. */
export async function runAdminCommand(a: Admin, command: string, values: CommandValues, flags: ReturnType<typeof checkFlags>): Promise<unknown> {
  const { limits } = flags;
  switch (command) {
    case 'accounts create': {
      const id = need(values.id, 'id');
      const made = await a.createAccount({ id, walletUsd: flags.wallet, budgets: limits.budgets ?? [] });
      // As the admin API answers 409: an account that exists is not made again, and its
      // wallet is not credited with --wallet; a script must not read that as done.
      if (!made.created) throw new AdminError(`Account "${id}" exists; its wallet is unchanged (wallet top-up adds to it).`, 'id');
      return made;
    }
    case 'accounts budgets': {
      if (limits.budgets === undefined) throw new UsageError('missing --budget (USD/PERIOD, repeated for several, or none)');
      await a.setAccountBudgets(need(values.id, 'id'), limits.budgets);
      return { account: values.id, budgets: limits.budgets };
    }
    case 'accounts list':
      return a.listAccounts();
    case 'wallet show': {
      const account = need(values.account, 'account');
      return { account, ...(await a.wallet(account)) };
    }
    case 'wallet top-up':
      return a.topUp(need(values.account, 'account'), need(flags.amount, 'usd'));
    case 'wallet adjust': {
      const account = need(values.account, 'account');
      const amountUsd = need(flags.amount, 'usd');
      const reason = need(values.reason?.trim(), 'reason');
      return a.credit(account, { amountUsd, reason, adjustment: true, ...(values.id === undefined ? {} : { id: values.id }) });
    }
    case 'keys create': {
      const kind = values.kind ?? 'developer';
      if (kind !== 'developer' && kind !== 'agent') throw new UsageError('--kind is developer or agent');
      const { account, model = null, label = null } = values;
      return a.createKey({ account: need(account, 'account'), kind, model, label, monthlyCapUsd: flags.cap ?? null, ...limits });
    }
    case 'keys limits': {
      const id = need(values.id, 'id');
      // The limits first: refused (a key that does not exist, an allow-list for an agent key),
      // nothing changed. The cap, its flag checked already, can then only fail with the store.
      const view = Object.keys(limits).length > 0 || flags.cap === undefined ? await a.setKeyLimits(id, limits) : null;
      return flags.cap !== undefined ? a.setMonthlyCap(id, flags.cap) : view;
    }
    case 'keys disable':
      await a.disableKey(need(values.id, 'id'));
      return { disabled: values.id };
    case 'keys enable':
      await a.enableKey(need(values.id, 'id'));
      return { enabled: values.id };
    case 'keys rotate':
      // The new plain key is printed this once: the store keeps only its digest.
      return a.rotateKey(need(values.id, 'id'));
    case 'keys delete':
      await a.deleteKey(need(values.id, 'id'));
      return { deleted: values.id };
    case 'keys list':
      return a.listKeys(need(values.account, 'account'));
    default:
      throw new UsageError(`unknown command: ${command}`, true);
  }
}
