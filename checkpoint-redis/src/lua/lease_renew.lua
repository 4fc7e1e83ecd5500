-- Lease renewal. KEYS: the thread's lease key. Arguments: `LeaseArgs` in scripts.rs.
local me, token, ttl_ms = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
local h = redis.call('HMGET', KEYS[1], 'h', 't')
local tok = tonumber(h[2])
if tok and tok == token and h[1] == me then
  redis.call('HSET', KEYS[1], 'e', fmt(now + ttl_ms))
  return {'OK'}
end
return {'FENCE', fmt(tok or 0)}
