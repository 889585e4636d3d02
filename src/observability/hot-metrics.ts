/**
 * Counters and histograms for the request path. prom-client's own validate the labels, hash
 * them into a string and allocate on every update, several times per request; these find
 * their series through one small map per label (no string is built) and add to numbers. They
 * are registered in a prom-client registry, which formats them with every other metric at
 * scrape time, so the exposition is prom-client's.
 */
import type { Registry } from 'prom-client';

type Labels = Record<string, string>;

/** Series by label values, one map level per label (at most three labels). */
class Family<S> {
  private readonly root = new Map<string, unknown>();
  private readonly all: Array<{ labels: Labels; series: S }> = [];

  constructor(
    private readonly labelNames: readonly string[],
    private readonly make: () => S,
  ) {
    if (labelNames.length > 3) throw new Error('at most three labels');
  }

  /** The series for these label values (in the order of the label names), made on first use. */
  at(a = '', b = '', c = ''): S {
    switch (this.labelNames.length) {
      case 0:
        return this.leaf(this.root, '', a, b, c);
      case 1:
        return this.leaf(this.root, a, a, b, c);
      case 2:
        return this.leaf(this.level(this.root, a), b, a, b, c);
      default:
        return this.leaf(this.level(this.level(this.root, a), b), c, a, b, c);
    }
  }

  private level(map: Map<string, unknown>, key: string): Map<string, unknown> {
    let next = map.get(key) as Map<string, unknown> | undefined;
    if (!next) map.set(key, (next = new Map()));
    return next;
  }

  private leaf(map: Map<string, unknown>, key: string, a: string, b: string, c: string): S {
    let series = map.get(key) as S | undefined;
    if (series === undefined) {
      series = this.make();
      map.set(key, series);
      const values = [a, b, c];
      const labels: Labels = {};
      this.labelNames.forEach((name, i) => {
        labels[name] = values[i]!;
      });
      this.all.push({ labels, series });
    }
    return series;
  }

  entries(): ReadonlyArray<{ labels: Labels; series: S }> {
    return this.all;
  }

  clear(): void {
    this.root.clear();
    this.all.length = 0;
  }
}

interface MetricValue {
  labels: Labels;
  value: number;
  metricName?: string;
}

/** What prom-client's registry reads from a metric. */
abstract class HotMetric<S> {
  readonly aggregator = 'sum';
  protected readonly family: Family<S>;
  abstract readonly type: 'counter' | 'histogram';

  constructor(
    readonly name: string,
    readonly help: string,
    labelNames: readonly string[],
    make: () => S,
    registry: Registry,
  ) {
    this.family = new Family(labelNames, make);
    registry.registerMetric(this as never);
  }

  protected abstract values(): MetricValue[];

  get(): Promise<{ name: string; help: string; type: string; aggregator: string; values: MetricValue[] }> {
    return Promise.resolve({ name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values: this.values() });
  }

  reset(): void {
    this.family.clear();
  }
}

export class HotCounter extends HotMetric<{ value: number }> {
  readonly type = 'counter';

  constructor(name: string, help: string, labelNames: readonly string[], registry: Registry) {
    super(name, help, labelNames, () => ({ value: 0 }), registry);
  }

  /** Adds `by` to the series of these label values. */
  inc(by: number, a?: string, b?: string, c?: string): void {
    this.family.at(a, b, c).value += by;
  }

  protected values(): MetricValue[] {
    return this.family.entries().map(({ labels, series }) => ({ labels, value: series.value }));
  }
}

interface Buckets {
  counts: Float64Array;
  sum: number;
  count: number;
}

export class HotHistogram extends HotMetric<Buckets> {
  readonly type = 'histogram';

  constructor(
    name: string,
    help: string,
    labelNames: readonly string[],
    private readonly bounds: readonly number[],
    registry: Registry,
  ) {
    super(name, help, labelNames, () => ({ counts: new Float64Array(bounds.length), sum: 0, count: 0 }), registry);
  }

  /** Records `value` in the series of these label values. */
  observe(value: number, a?: string, b?: string, c?: string): void {
    const s = this.family.at(a, b, c);
    s.sum += value;
    s.count++;
    const bounds = this.bounds;
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]!) {
        s.counts[i]!++;
        break;
      }
    }
  }

  protected values(): MetricValue[] {
    const out: MetricValue[] = [];
    for (const { labels, series } of this.family.entries()) {
      let cumulative = 0;
      this.bounds.forEach((le, i) => {
        cumulative += series.counts[i]!;
        out.push({ labels: { le: String(le), ...labels }, value: cumulative, metricName: `${this.name}_bucket` });
      });
      out.push({ labels: { le: '+Inf', ...labels }, value: series.count, metricName: `${this.name}_bucket` });
      out.push({ labels, value: series.sum, metricName: `${this.name}_sum` });
      out.push({ labels, value: series.count, metricName: `${this.name}_count` });
    }
    return out;
  }
}
