-- KEYS: floor, queue. ARGV: member, gateway, connId, now, max talk ms, queue (1/0), max queue, grantId.
local now = tonumber(ARGV[4])
local f = redis.call('HMGET', KEYS[1], 'holder', 'notAfter', 'grantId', 'notBefore')
if f[1] and tonumber(f[2] or '0') > now then
  if f[1] == ARGV[1] then return {'held', f[3], f[4], f[2]} end
  if ARGV[6] == '1' then
    local items = redis.call('LRANGE', KEYS[2], 0, -1)
    local prefix = ARGV[1] .. ' '
    for i, v in ipairs(items) do
      if string.sub(v, 1, string.len(prefix)) == prefix then return {'queued', tostring(i)} end
    end
    if #items >= tonumber(ARGV[7]) then return {'refused', f[1]} end
    redis.call('RPUSH', KEYS[2], ARGV[1] .. ' ' .. ARGV[2] .. ' ' .. ARGV[3])
    redis.call('PEXPIRE', KEYS[2], 3600000)
    return {'queued', tostring(#items + 1)}
  end
  return {'refused', f[1]}
end
local notAfter = now + tonumber(ARGV[5])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'gateway', ARGV[2], 'conn', ARGV[3], 'grantId', ARGV[8], 'notBefore', ARGV[4], 'notAfter', tostring(notAfter))
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[5]) + 60000)
return {'granted', ARGV[8], ARGV[4], tostring(notAfter)}
