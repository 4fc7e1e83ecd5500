-- Lexicographic range scans, newest first, with an index-intersection filter.

local function bound_min(prefix, lo)
  if lo == '-' then return '[' .. prefix end
  return string.sub(lo, 1, 1) .. prefix .. string.sub(lo, 2)
end
local function bound_max(prefix, hi)
  if hi == '+' then
    if prefix == '' then return '+' end
    return '(' .. prefix .. HI
  end
  return string.sub(hi, 1, 1) .. prefix .. string.sub(hi, 2)
end
local function ns_of(ref, skip)
  local pos = 1
  for _ = 1, skip do pos = comp_end(ref, pos) + 1 end
  return string.sub(ref, pos)
end
local function scan(cands, lo, hi, nscheck, nsskip, want, budget)
  local best, bestn = 1, nil
  if #cands > 1 then
    for i, c in ipairs(cands) do
      local n = redis.call('ZLEXCOUNT', c[1], bound_min(c[2], lo), bound_max(c[2], hi))
      if bestn == nil or n < bestn then best, bestn = i, n end
    end
  end
  local d = cands[best]
  local checks = {}
  for i, c in ipairs(cands) do
    if i ~= best then checks[#checks + 1] = c end
  end
  local min, max = bound_min(d[2], lo), bound_max(d[2], hi)
  local out, examined, last, done = {}, 0, false, false
  while #out < want do
    local batch = math.min(256, budget - examined)
    if batch <= 0 then break end
    local ms = redis.call('ZREVRANGEBYLEX', d[1], max, min, 'LIMIT', 0, batch)
    -- The batch's references, and which of them pass the namespace check.
    local refs, pass, prev = {}, {}, last
    for i, m in ipairs(ms) do
      local ref = string.sub(m, #d[2] + 1)
      if d[3] then
        -- Keep the first d[3] components (`\1 gref pack(tokens)` members of the global
        -- index); a repeated gref (see g_lookup) is listed once.
        local pos = 0
        for _ = 1, d[3] do pos = comp_end(ref, pos + 1) end
        ref = string.sub(ref, 1, pos)
      end
      refs[i] = ref
      pass[i] = ref ~= prev and (nscheck == '' or ns_of(ref, nsskip) == nscheck)
      prev = ref
    end
    -- The other lists of the intersection: one ZMSCORE per list for the whole batch (one
    -- ZSCORE per candidate costs several times more in calls from Lua).
    for _, c in ipairs(checks) do
      local at, members = {}, {}
      for i = 1, #refs do
        if pass[i] then
          at[#at + 1] = i
          members[#members + 1] = c[2] .. refs[i]
        end
      end
      if #members == 0 then break end
      local scores = redis.call('ZMSCORE', c[1], unpack(members))
      for k, i in ipairs(at) do
        if not scores[k] then pass[i] = false end
      end
    end
    local full = false
    for i = 1, #refs do
      examined = examined + 1
      last = refs[i]
      if pass[i] then
        out[#out + 1] = refs[i]
        if #out >= want then full = true; break end
      end
    end
    if full then break end
    if #ms < batch then done = true; break end
    max = '(' .. d[2] .. last
  end
  return out, last, done
end
