/** The admin token the admin tests use, and its SHA-256 (what the options hold). */
import { createHash } from 'node:crypto';

export const ADMIN_TOKEN = 'adm-test-token-0123456789abcdefghijklmnop';
export const ADMIN_SHA = createHash('sha256').update(ADMIN_TOKEN).digest('hex');
