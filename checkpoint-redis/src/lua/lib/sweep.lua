-- Mark-and-sweep of values (needs the base, thread and chunk helpers).

-- Deletes the values among `candidates` (fields of `BL`) that no checkpoint of the thread
-- names any more. Values carry no reference counts, so a put never pays for bookkeeping;
-- the ones that lose a checkpoint (prune, delete_for_runs, a re-put that changes a
-- checkpoint) are checked here against every remaining record, read in HSCAN pages.
-- Candidates may also be manifest or chunk fields (a refused put's own writes); a chunk is
-- deleted when no remaining manifest names it.
-- Marks (sets to nil) the chunks in `set` that manifest `m` names; returns how many.
local function unmark(set, m)
  local n = 0
  for _, c in ipairs(manifest_ids(m)) do
    if set[c] then set[c] = nil; n = n + 1 end
  end
  return n
end

local function sweep(candidates)
  local want, n, chunks, nc = {}, 0, {}, 0
  for _, f in ipairs(candidates) do
    local pre = string.sub(f, 1, 2)
    if pre == CHUNK then
      if not chunks[f] then chunks[f] = true; nc = nc + 1 end
    else
      if pre == MANIFEST then f = string.sub(f, 3) end
      if not want[f] then want[f] = true; n = n + 1 end
    end
  end
  local cursor = '0'
  while n > 0 do
    local page = redis.call('HSCAN', CP, cursor, 'COUNT', 500)
    cursor = page[1]
    local kv = page[2]
    for i = 2, #kv, 2 do
      for _, f in ipairs(list_of((netstr(kv[i], 1)))) do
        if want[f] then want[f] = nil; n = n - 1 end
      end
    end
    if cursor == '0' then break end
  end
  local dead, mdead = {}, {}
  for f in pairs(want) do
    dead[#dead + 1] = f
    mdead[#mdead + 1] = MANIFEST .. f
  end
  if #dead > 0 then
    for _, m in ipairs(chunked('HMGET', BL, mdead)) do
      if m then
        for _, c in ipairs(manifest_ids(m)) do
          if not chunks[c] then chunks[c] = true; nc = nc + 1 end
        end
      end
    end
    chunked('HDEL', BL, dead)
    chunked('HDEL', BL, mdead)
  end
  if nc == 0 then return end
  -- A chunk lives while a stored manifest or a record's own manifest names it.
  cursor = '0'
  repeat
    local page = redis.call('HSCAN', BL, cursor, 'MATCH', MANIFEST .. '*', 'COUNT', 1000)
    cursor = page[1]
    local kv = page[2]
    for i = 2, #kv, 2 do nc = nc - unmark(chunks, kv[i]) end
  until cursor == '0' or nc == 0
  if nc == 0 then return end
  cursor = '0'
  repeat
    local page = redis.call('HSCAN', CP, cursor, 'COUNT', 500)
    cursor = page[1]
    local kv = page[2]
    for i = 2, #kv, 2 do
      local ms = record_manifests(kv[i])
      for j = 2, #ms, 2 do nc = nc - unmark(chunks, ms[j]) end
    end
  until cursor == '0' or nc == 0
  if nc == 0 then return end
  local gone = {}
  for c in pairs(chunks) do gone[#gone + 1] = c end
  chunked('HDEL', BL, gone)
end
