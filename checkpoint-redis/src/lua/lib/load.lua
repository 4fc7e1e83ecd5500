-- Loading a whole tuple, chunked values reassembled (needs the thread and chunk helpers).

-- The stored form of a chunked value: its manifest's header and chunks joined, or false
-- when a chunk is missing.
local function assemble(m)
  local tag, i = netstr(m, 2)
  local hdr = netstr(m, i)
  local ids = manifest_ids(m)
  local parts = {}
  if #ids > 0 then parts = chunked('HMGET', BL, ids) end
  for _, p in ipairs(parts) do
    if not p then return false end
  end
  return 'V' .. #tag .. ':' .. tag .. hdr .. table.concat(parts)
end

local function load_tuple(tref)
  local rec = redis.call('HGET', CP, tref)
  if not rec then return nil end
  local cv = record_parts(rec)
  local vals = {}
  if #cv > 0 then vals = chunked('HMGET', BL, cv) end
  local inline = {}
  local ms = record_manifests(rec)
  for i = 1, #ms, 2 do inline[ms[i]] = ms[i + 1] end
  for i, f in ipairs(cv) do
    if not vals[i] then
      -- The record's own manifest first (what its put wrote), then the stored one.
      if inline[f] then vals[i] = assemble(inline[f]) end
      if not vals[i] then
        local m = redis.call('HGET', BL, MANIFEST .. f)
        if m then vals[i] = assemble(m) end
      end
    end
  end
  local ws = redis.call('ZRANGEBYLEX', WI, '[' .. tref, '(' .. tref .. HI)
  local wv = {}
  if #ws > 0 then wv = chunked('HMGET', WV, write_uniqs(tref, ws)) end
  return {tref, rec, vals, ws, wv}
end
