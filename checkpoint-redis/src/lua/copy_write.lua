-- The write half of `copy_thread`: inserts what the target lacks: `n` (tref, record)
-- pairs, `m` (field, value) pairs, then (member, value) write pairs to the end.
-- Arguments: `CopyWriteArgs` in scripts.rs.
local ttl, ethread, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
local ttl, ethread = ARGV[1], ARGV[2]
local i = 4
local added = 0
for _ = 1, n do
  local tref, rec = ARGV[i], ARGV[i + 1]
  i = i + 2
  if redis.call('HSETNX', CP, tref, rec) == 1 then
    added = added + 1
    local _, toks = record_parts(rec)
    local idp, nsp = split_tref(tref)
    zadd_all(MI, {BYID .. tref, BYNS .. nsp .. idp}, toks, '\0' .. tref)
    if INLINE then g_set(idp .. ethread .. nsp, toks) end
  end
end
local nb = tonumber(ARGV[i])
i = i + 1
for _ = 1, nb do
  redis.call('HSETNX', BL, ARGV[i], ARGV[i + 1])
  i = i + 2
end
while i <= #ARGV do
  local m, v = ARGV[i], ARGV[i + 1]
  i = i + 2
  local z1 = comp_end(m, 1)
  local z2 = comp_end(m, z1 + 1)
  local z3 = comp_end(m, z2 + 1)
  if redis.call('HSETNX', WV, string.sub(m, 1, z2) .. string.sub(m, z3 + 1), v) == 1 then
    redis.call('ZADD', WI, 0, m)
  end
end
if INLINE and n > 0 then redis.call('ZADD', GMI, 0, '\3' .. ethread .. CP) end
touch(ttl)
return {'OK', added}
