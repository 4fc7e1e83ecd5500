-- Chunked values (see the `chunk` module): reading manifests, in records and in `BL`.

-- The chunk fields a manifest (`C netstr(tag) netstr(header) id...`) names, in order.
local function manifest_ids(m)
  local _, i = netstr(m, 2)
  _, i = netstr(m, i)
  local ids = {}
  for k = i, #m, 16 do ids[#ids + 1] = CHUNK .. string.sub(m, k, k + 15) end
  return ids
end

-- The (field, manifest, ...) list a record carries for the values its put chunked.
local function record_manifests(rec)
  local _, i = netstr(rec, 1)
  _, i = netstr(rec, i)
  _, i = netstr(rec, i)
  return list_of((netstr(rec, i)))
end
