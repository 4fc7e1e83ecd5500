-- The read half of `copy_thread`: a snapshot of a thread's checkpoints, values and
-- writes. No arguments.
local cp = redis.call('HGETALL', CP)
local bl = redis.call('HGETALL', BL)
local ws = redis.call('ZRANGE', WI, 0, -1)
local wv = {}
for i, m in ipairs(ws) do
  local z1 = comp_end(m, 1)
  local z2 = comp_end(m, z1 + 1)
  local z3 = comp_end(m, z2 + 1)
  wv[i] = redis.call('HGET', WV, string.sub(m, 1, z2) .. string.sub(m, z3 + 1))
end
return {cp, bl, ws, wv}
