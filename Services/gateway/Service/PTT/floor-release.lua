-- KEYS: floor, queue. ARGV: holder ('' with a grantId), connId ('' for any), grantId
-- ('' with a holder), now, max talk ms, the next grant's ID. Releases a matching
-- grant and grants the first in the queue ('free', or 'granted' with the new
-- holder, grantId, notBefore, notAfter); a holder that is not holding gives up its
-- place in the queue ('dequeued'); else 'none'.
local f = redis.call('HMGET', KEYS[1], 'holder', 'conn', 'grantId')
local matches = false
if f[1] then
  if ARGV[3] ~= '' then matches = (f[3] == ARGV[3])
  else matches = (f[1] == ARGV[1] and (ARGV[2] == '' or f[2] == ARGV[2])) end
end
if not matches then
  if ARGV[1] ~= '' then
    local prefix = ARGV[1] .. ' '
    for _, v in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
      if string.sub(v, 1, string.len(prefix)) == prefix and (ARGV[2] == '' or string.sub(v, -string.len(ARGV[2])) == ARGV[2]) then
        redis.call('LREM', KEYS[2], 1, v)
        return {'dequeued'}
      end
    end
  end
  return {'none'}
end
redis.call('DEL', KEYS[1])
local nextOne = redis.call('LPOP', KEYS[2])
if not nextOne then return {'free'} end
local parts = {}
for word in string.gmatch(nextOne, '%S+') do table.insert(parts, word) end
local now = tonumber(ARGV[4])
local notAfter = now + tonumber(ARGV[5])
redis.call('HSET', KEYS[1], 'holder', parts[1], 'gateway', parts[2] or '', 'conn', parts[3] or '', 'grantId', ARGV[6], 'notBefore', ARGV[4], 'notAfter', tostring(notAfter))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]) + 60000)
return {'granted', parts[1], ARGV[6], ARGV[4], tostring(notAfter)}
