/** The output guardrails' CPU per streamed event, as measured (guardrail-events.ts) and as reported. */

export interface GuardrailEventCost {
  /** Events read per stream. */
  events: number;
  streams: number;
  rounds: number;
  /** Median µs per event, unguarded and guarded, and what the guardrails add. */
  bareUs: number;
  guardedUs: number;
  addedUs: number;
}

export function guardrailEventLines(c: GuardrailEventCost): string[] {
  return [
    '### Output guardrails per streamed event',
    '',
    `The chat event reader over the benchmark's streamed answer (${c.events} events, one per read), in the bench process, ${c.streams} streams per round, median of ${c.rounds} rounds; guarded: a \`pii\` redact of every entity and a \`regex\` block on output.`,
    '',
    '| Reader | CPU µs per event |',
    '|---|---:|',
    `| no output guardrail (the byte fast path) | ${c.bareUs.toFixed(2)} |`,
    `| with output guardrails | ${c.guardedUs.toFixed(2)} |`,
    `| added by the guardrails | ${c.addedUs.toFixed(2)} |`,
  ];
}
