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
  /**
   * Median µs per event of the real shape's answer (an alias renamed in every event, the usage
   * chunk nobody asked for dropped), unguarded. Absent from results written before it was measured.
   */
  realUs?: number;
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
    ...(c.realUs === undefined
      ? []
      : [`| no output guardrail, real shape (the model renamed in each event, the unasked usage chunk dropped) | ${c.realUs.toFixed(2)} |`]),
  ];
}
