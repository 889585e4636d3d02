import { fileURLToPath } from 'node:url';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

/** @type {import('next').NextConfig} */
const config = {
  // An app that installed model-gateway from npm needs only:
  //   serverExternalPackages: ['model-gateway']
  // This example imports the package by its own name from inside its repository (package
  // self-reference), which Next.js bundles; so Next.js may read above the app's directory,
  // and the gateway's dependencies are the ones loaded by Node.js at run time.
  turbopack: { root: repoRoot },
  outputFileTracingRoot: repoRoot,
  serverExternalPackages: ['@whatwg-node/server', 'gpt-tokenizer', 'ioredis', 'lru-cache', 'minisearch', 'undici', 'zod'],
};

export default config;
