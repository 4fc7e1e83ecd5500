-- Global index maintenance (Cluster, and repair): a list of operations, each an op code
-- and its operands. `A` adds a checkpoint's entries (keeping tokens it had), `S` sets them,
-- `R` removes them, `X` removes them only if the checkpoint is gone from its thread's
-- record hash; `T` adds a thread's entry and records when (`GTS`), `U` removes a thread
-- entry (found without its thread) unless it was written within the grace period.
-- Arguments: `GindexArgs` in scripts.rs.
local i = 1
while i <= #ARGV do
  local op = ARGV[i]
  if op == 'A' then
    g_add(ARGV[i + 1], list_of(ARGV[i + 2]))
    i = i + 3
  elseif op == 'S' then
    g_set(ARGV[i + 1], list_of(ARGV[i + 2]))
    i = i + 3
  elseif op == 'R' then
    g_remove(ARGV[i + 1])
    i = i + 2
  elseif op == 'X' then
    if redis.call('HEXISTS', ARGV[i + 2], ARGV[i + 3]) == 0 then g_remove(ARGV[i + 1]) end
    i = i + 4
  elseif op == 'T' then
    redis.call('ZADD', GMI, 0, ARGV[i + 1])
    redis.call('HSET', GTS, ARGV[i + 1], now_ms())
    i = i + 2
  elseif op == 'U' then
    local at = tonumber(redis.call('HGET', GTS, ARGV[i + 1]) or '0')
    if at + tonumber(ARGV[i + 2]) < now_ms() then
      redis.call('ZREM', GMI, ARGV[i + 1])
      redis.call('HDEL', GTS, ARGV[i + 1])
    end
    i = i + 3
  else
    return redis.error_reply('checkpoint-redis: unknown index op')
  end
end
return {'OK'}
