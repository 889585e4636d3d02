import v8 from 'node:v8';
const s0 = v8.getHeapStatistics();
const t = process.hrtime.bigint();
if (process.argv[2]) await import(process.argv[2]);
const m = process.memoryUsage();
const s = v8.getHeapSpaceStatistics().map(x => `${x.space_name.replace('_space','')}:${(x.physical_space_size/1048576).toFixed(1)}/${(x.space_used_size/1048576).toFixed(1)}`).filter(x=>!/:0.0\/0.0/.test(x)).join(' ');
console.log(process.argv[2] ?? '-', `ms ${Number(process.hrtime.bigint()-t)/1e6|0} rss ${(m.rss/1048576).toFixed(1)} heapTotal ${(m.heapTotal/1048576).toFixed(1)} used ${(m.heapUsed/1048576).toFixed(1)} malloced ${(v8.getHeapStatistics().malloced_memory/1048576).toFixed(1)} | ${s}`);
