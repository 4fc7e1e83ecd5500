-- Delta channels in deletions: which checkpoints the staying ones need (the Rust function
-- `checkpoint_core::delta::needed_ancestors` says the same in more words). Needs the base
-- and chunk helpers.

local UNESC = {['\1'] = '\0', ['\2'] = '\1'}
local function unesc(s) return (string.gsub(s, '\1([\1\2])', UNESC)) end

-- The JSON body of a record (after its four netstrings), decoded.
local function record_body(rec)
  local _, i = netstr(rec, 1)
  _, i = netstr(rec, i)
  _, i = netstr(rec, i)
  _, i = netstr(rec, i)
  return cjson.decode(string.sub(rec, i))
end

-- Whether the record stores a value for the channel whose blob-field prefix is `prefix`
-- (`esc(ns) esc(channel)`): a value that is not removed, or a chunked value's manifest.
local function record_stores(rec, fields, prefix)
  for _, f in ipairs(fields) do
    if string.sub(f, 1, #prefix) == prefix then
      local v = redis.call('HGET', BL, f)
      if v then return v ~= 'X' end
      local ms = record_manifests(rec)
      for i = 1, #ms, 2 do
        if ms[i] == f then return true end
      end
      return redis.call('HEXISTS', BL, MANIFEST .. f) == 1
    end
  end
  return false
end

-- The channels (raw names) a checkpoint needs history for: the keys of its
-- `counters_since_delta_snapshot` metadata; with `delta_writes_versioned` and no counters,
-- every channel it names without storing it.
local function record_needs(rec, fields, nsp)
  local ok, body = pcall(record_body, rec)
  if not ok or type(body) ~= 'table' or type(body.metadata) ~= 'table' then return {} end
  local md = body.metadata
  local out = {}
  local counters = md.counters_since_delta_snapshot
  if type(counters) == 'table' then
    for k in pairs(counters) do
      if type(k) == 'string' then out[#out + 1] = k end
    end
  end
  if #out == 0 and md.delta_writes_versioned == true then
    for _, f in ipairs(fields) do
      local z = comp_end(f, #nsp + 1)
      if z and string.sub(f, 1, #nsp) == nsp then
        local prefix = string.sub(f, 1, z)
        if not record_stores(rec, fields, prefix) then
          out[#out + 1] = unesc(string.sub(f, #nsp + 1, z - 1))
        end
      end
    end
  end
  return out
end

-- The checkpoints (trefs) of namespace `nsp` that the checkpoints `staying` (trefs) need
-- for their delta channels, transitively: a set.
local function delta_needed(staying, nsp)
  local recs = {}
  local function rec_of(tref)
    local r = recs[tref]
    if r == nil then
      r = redis.call('HGET', CP, tref) or false
      recs[tref] = r
    end
    return r
  end
  local needed, visited, work = {}, {}, {}
  local function follow(rec, idp)
    local fields, _, parent = record_parts(rec)
    -- Ids only decrease along parent links: the walk ends even on damaged records.
    if parent ~= '' and parent < idp then return fields, parent end
    return fields, nil
  end
  for _, tref in ipairs(staying) do
    local rec = rec_of(tref)
    if rec then
      local idp = split_tref(tref)
      local fields, parent = follow(rec, idp)
      if parent then
        for _, c in ipairs(record_needs(rec, fields, nsp)) do work[#work + 1] = {parent, c} end
      end
    end
  end
  while #work > 0 do
    local item = table.remove(work)
    local idp, channel = item[1], item[2]
    local key = idp .. channel
    if not visited[key] then
      visited[key] = true
      local tref = idp .. nsp
      local rec = rec_of(tref)
      if rec then
        local fields, parent = follow(rec, idp)
        if not needed[tref] then
          needed[tref] = true
          if parent then
            for _, c in ipairs(record_needs(rec, fields, nsp)) do work[#work + 1] = {parent, c} end
          end
        end
        if parent and not record_stores(rec, fields, nsp .. esc(channel)) then
          work[#work + 1] = {parent, channel}
        end
      end
    end
  end
  return needed
end
