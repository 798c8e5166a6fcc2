-- wrk script for benchmarks/serve.py: POST /embed with one sentence per request, cycling through the JSON bodies
-- in the file $BODIES (one per line); prints one RESULT line of JSON: requests, seconds, p50/p95/p99 ms, statuses.
local bodies = {}
for line in io.lines(os.getenv("BODIES")) do bodies[#bodies + 1] = line end
local threads = {}
local counter = 0
function setup(thread)
  counter = counter + 1
  thread:set("offset", counter * 7919)
  table.insert(threads, thread)
end
function init(args)
  i = offset
  statuses = {}
end
function request()
  i = i + 1
  return wrk.format("POST", "/embed", {["Content-Type"] = "application/json"}, bodies[(i % #bodies) + 1])
end
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end
function done(summary, latency, requests)
  local counts = {}
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for k, v in pairs(s) do counts[k] = (counts[k] or 0) + v end
  end
  local parts = {}
  for k, v in pairs(counts) do parts[#parts + 1] = string.format('"%d": %d', k, v) end
  io.write(string.format('RESULT {"requests": %d, "seconds": %.6f, "p50": %.3f, "p95": %.3f, "p99": %.3f, "socket_errors": %d, "statuses": {%s}}\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1e3, latency:percentile(95) / 1e3,
    latency:percentile(99) / 1e3, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    table.concat(parts, ", ")))
end
