-- Helpers every script uses: escaping, netstrings, record parts, batched calls, index
-- member lists. Scripts include only the helper files they call: every closure a script
-- defines costs a few microseconds on every call.

local HI = '\255'
local BYID, BYNS = '\1', '\2'
-- Field prefixes of chunks and manifests in BL (see the `chunk` module).
local CHUNK, MANIFEST = '\1\3', '\1\4'
local ESC = {['\0'] = '\1\1', ['\1'] = '\1\2'}
local function esc(s) return (string.gsub(s, '[%z\1]', ESC)) .. '\0' end
local function comp_end(s, from) return string.find(s, '\0', from, true) end
local function netstr(s, i)
  local c = string.find(s, ':', i, true)
  local n = tonumber(string.sub(s, i, c - 1))
  return string.sub(s, c + 1, c + n), c + n + 1
end
local function list_of(s)
  local out, i = {}, 1
  while i <= #s do
    local v
    v, i = netstr(s, i)
    out[#out + 1] = v
  end
  return out
end
local function pack(list)
  local parts = {}
  for i, v in ipairs(list) do parts[i] = #v .. ':' .. v end
  return table.concat(parts)
end
local function record_parts(rec)
  local cv, i = netstr(rec, 1)
  local tk
  tk, i = netstr(rec, i)
  local parent
  parent, i = netstr(rec, i)
  return list_of(cv), list_of(tk), parent
end
local function split_tref(tref)
  local z = comp_end(tref, 1)
  return string.sub(tref, 1, z), string.sub(tref, z + 1)
end
local function chunked(cmd, key, items)
  local out = {}
  for i = 1, #items, 1000 do
    local part = redis.call(cmd, key, unpack(items, i, math.min(i + 999, #items)))
    if type(part) == 'table' then
      for _, v in ipairs(part) do out[#out + 1] = v end
    end
  end
  return out
end
-- ZADD (score 0) of `extra` members and of `tok .. suffix` for each token.
local function zadd_all(key, extra, toks, suffix)
  local args = {}
  for _, m in ipairs(extra) do
    args[#args + 1] = 0
    args[#args + 1] = m
  end
  for _, t in ipairs(toks) do
    args[#args + 1] = 0
    args[#args + 1] = t .. suffix
  end
  for i = 1, #args, 1000 do
    redis.call('ZADD', key, unpack(args, i, math.min(i + 999, #args)))
  end
end
-- ZADD of the (score, member) pairs ARGV[from..to], as the client built them.
local function zadd_argv(key, from, to)
  for i = from, to, 1000 do
    redis.call('ZADD', key, unpack(ARGV, i, math.min(i + 999, to)))
  end
end
-- ZREM of `extra` members and of `tok .. suffix` for each token.
local function zrem_all(key, extra, toks, suffix)
  local args = {}
  for _, m in ipairs(extra) do args[#args + 1] = m end
  for _, t in ipairs(toks) do args[#args + 1] = t .. suffix end
  for i = 1, #args, 1000 do
    redis.call('ZREM', key, unpack(args, i, math.min(i + 999, #args)))
  end
end
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function fmt(n) return string.format('%d', n) end
