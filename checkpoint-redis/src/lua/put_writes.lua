-- `put_writes`: records a task's pending writes. Without `replace`, the first write of a
-- (task, index) wins (`HSETNX`). Each write comes as (esc(task_id) idx8, stored form) and
-- is stored as given. Arguments: `PutWritesArgs` in scripts.rs.
local ttl, fence, tref, replace, path = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == '1', ARGV[5]
local first = 6
local stale = check_fence(fence)
if stale then return stale end
for i = first, #ARGV, 2 do
  local tail = ARGV[i]
  local uniq = tref .. tail
  if replace then
    local old = redis.call('HGET', WV, uniq)
    if old then
      -- The stored write starts with netstr(task path).
      local c = string.find(old, ':', 1, true)
      local oldpath = string.sub(old, c + 1, c + tonumber(string.sub(old, 1, c - 1)))
      redis.call('ZREM', WI, tref .. oldpath .. tail)
    end
    redis.call('HSET', WV, uniq, ARGV[i + 1])
    redis.call('ZADD', WI, 0, tref .. path .. tail)
  elseif redis.call('HSETNX', WV, uniq, ARGV[i + 1]) == 1 then
    redis.call('ZADD', WI, 0, tref .. path .. tail)
  end
end
touch(ttl)
return {'OK'}
