-- `delete_for_runs` in one thread: deletes the listed checkpoints whose record carries
-- the run's token, except what the remaining checkpoints need for their delta channels.
-- Arguments: `DeleteRunsArgs` in scripts.rs.
local ethread, run_token = ARGV[1], ARGV[2]
local first_ref = 3
local n, candidates = 0, {}
-- The listed checkpoints of the run, by namespace.
local doomed, namespaces = {}, {}
for i = first_ref, #ARGV do
  local rec = redis.call('HGET', CP, ARGV[i])
  if rec then
    local _, toks = record_parts(rec)
    for _, t in ipairs(toks) do
      if t == run_token then
        local _, nsp = split_tref(ARGV[i])
        if not doomed[nsp] then
          doomed[nsp] = {}
          namespaces[#namespaces + 1] = nsp
        end
        doomed[nsp][ARGV[i]] = rec
        break
      end
    end
  end
end
for _, nsp in ipairs(namespaces) do
  local p = BYNS .. nsp
  local staying = {}
  for _, m in ipairs(redis.call('ZRANGEBYLEX', MI, '[' .. p, '(' .. p .. HI)) do
    local tref = string.sub(m, #p + 1) .. nsp
    if not doomed[nsp][tref] then staying[#staying + 1] = tref end
  end
  local needed = delta_needed(staying, nsp)
  for tref, rec in pairs(doomed[nsp]) do
    if not needed[tref] then
      delete_checkpoint(tref, rec, ethread, candidates)
      n = n + 1
    end
  end
end
sweep(candidates)
return {'OK', GREM, n}
