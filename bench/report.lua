-- wrk script for bench/proxy_bench.py and bench/cache_bench.py: when the run ends, print one JSON line
-- (prefixed "BENCH_JSON ") with the request count, the error counters and the
-- latency percentiles in microseconds. Only done() is defined: a request() or
-- response() hook would make wrk itself much slower.

local function num(x)
  if x ~= x or x == nil then return 0 end -- NaN (no requests) -> 0
  return x
end

done = function(summary, latency, requests)
  local e = summary.errors
  local function p(q) return math.floor(num(latency:percentile(q))) end
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"p50":%d,"p90":%d,"p95":%d,"p99":%d,"max":%d,"mean":%.1f}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    math.floor(num(latency.min)), p(50), p(90), p(95), p(99), math.floor(num(latency.max)),
    num(latency.mean)))
end
