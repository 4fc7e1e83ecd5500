-- Thread guards every writing script needs: TTL and fence. Kept apart from the other
-- helpers so the hot paths (`put` of a new checkpoint, `put_writes`) define nothing else:
-- every closure a script defines costs time on every call.

-- Thread TTL: the per-thread override (0 = pinned) or the saver's default.
local function touch(default)
  local o = redis.call('HGET', OPT, 't')
  local ms = tonumber(o or default)
  if ms and ms > 0 then
    for _, k in ipairs(DATA) do redis.call('PEXPIRE', k, ms) end
    redis.call('PEXPIRE', OPT, ms)
  end
end

local function check_fence(fence)
  if fence == '' then return nil end
  local cur = redis.call('HGET', LEASE, 't') or '0'
  if tonumber(cur) ~= tonumber(fence) then return {'FENCE', cur} end
  return nil
end
