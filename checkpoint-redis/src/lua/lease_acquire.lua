-- Lease acquisition. KEYS: the thread's lease key. Arguments: `LeaseArgs` in scripts.rs.
local me, ttl_ms = ARGV[1], tonumber(ARGV[2])
local now = now_ms()
local h = redis.call('HMGET', KEYS[1], 'h', 't', 'e')
local holder, tok, exp = h[1], tonumber(h[2]), tonumber(h[3])
local token
if tok and exp and exp > now then
  if holder ~= me then return false end
  token = tok
elseif tok then
  token = tok + 1
else
  token = 1
end
redis.call('HSET', KEYS[1], 'h', me, 't', fmt(token), 'e', fmt(now + ttl_ms))
return fmt(token)
