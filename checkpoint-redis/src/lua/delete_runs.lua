-- `delete_for_runs` in one thread: deletes the listed checkpoints whose record carries
-- the run's token. Arguments: `DeleteRunsArgs` in scripts.rs.
local ethread, run_token = ARGV[1], ARGV[2]
local first_ref = 3
local n, candidates = 0, {}
for i = first_ref, #ARGV do
  local rec = redis.call('HGET', CP, ARGV[i])
  if rec then
    local _, toks = record_parts(rec)
    for _, t in ipairs(toks) do
      if t == run_token then
        delete_checkpoint(ARGV[i], rec, ethread, candidates)
        n = n + 1
        break
      end
    end
  end
end
sweep(candidates)
return {'OK', GREM, n}
