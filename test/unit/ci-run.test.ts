/**
 * `.ci/run`'s PostgreSQL step changes the system's authentication (`pg_hba.conf`) and creates
 * the `test` database only under CI=true: on a developer's machine it says what to set up and
 * touches nothing. The step runs as written, with every command it would call on the system
 * (pg_isready, psql, su, sed, pg_ctlcluster, id) replaced by a stub that logs its call.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const script = readFileSync(new URL('../../.ci/run', import.meta.url), 'utf8');
const step = script.slice(script.indexOf('echo "== postgres"'), script.indexOf('echo "== type-check"'));

/** Runs the step with a PostgreSQL that answers but refuses user postgres; returns the stubs' log and the output. */
function runStep(ci: string | undefined): { calls: string; output: string } {
  const dir = mkdtempSync(join(tmpdir(), 'mg-ci-run-'));
  const log = join(dir, 'calls.log');
  const stub = (name: string, code: number) => {
    writeFileSync(join(dir, name), `#!/bin/sh\necho "${name} $*" >> "${log}"\nexit ${code}\n`);
    chmodSync(join(dir, name), 0o755);
  };
  stub('pg_isready', 0);
  stub('psql', 1);
  stub('id', 0);
  for (const name of ['su', 'sed', 'pg_ctlcluster', 'apt-get', 'createdb']) stub(name, 0);
  writeFileSync(log, '');
  const env: Record<string, string> = { PATH: `${dir}:/usr/bin:/bin`, POSTGRES_URL: 'postgres://postgres@127.0.0.1:5432/test' };
  if (ci !== undefined) env.CI = ci;
  const res = spawnSync('bash', ['-c', `set -uo pipefail\n${step}`], { env, encoding: 'utf8' });
  return { calls: readFileSync(log, 'utf8'), output: res.stdout + res.stderr };
}

describe('.ci/run, PostgreSQL step', () => {
  it('on a developer machine: no su, no sed on pg_hba.conf, a warning saying what to set up', () => {
    const { calls, output } = runStep(undefined);
    expect(calls).toMatch(/^psql /m);
    expect(calls).not.toMatch(/^(su|sed|pg_ctlcluster) /m);
    expect(output).toMatch(/allow trust for 127\.0\.0\.1 in pg_hba\.conf/);
  });

  it('under CI=true: sets PostgreSQL up for the tests', () => {
    const { calls } = runStep('true');
    expect(calls).toMatch(/^su postgres -c /m);
  });
});
