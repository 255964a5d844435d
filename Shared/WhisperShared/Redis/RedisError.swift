/// Failures of the Redis client. Descriptions never include command arguments.
public enum RedisError: Error, Sendable, Equatable, CustomStringConvertible {
    /// No connection to Redis right now; the client is reconnecting.
    case unavailable
    /// The connection closed before the reply arrived: the command may or may not have run.
    case connectionClosed
    /// Redis answered with an error reply.
    case server(String)
    /// The bytes from Redis could not be parsed.
    case protocolViolation(String)
    /// A reply had a shape the caller did not expect.
    case unexpectedReply(String)
    /// The client is shutting down.
    case shutdown
    /// Fewer replicas than required acknowledged a write within the timeout
    /// (`RedisClient.waitForReplicas`): the write is on the master, not yet safe from
    /// its loss.
    case replicasBehind(acknowledged: Int, required: Int)

    public var description: String {
        switch self {
        case .unavailable: "redis unavailable"
        case .connectionClosed: "redis connection closed"
        case .server(let message): "redis error: \(message)"
        case .protocolViolation(let message): "redis protocol violation: \(message)"
        case .unexpectedReply(let what): "unexpected redis reply: \(what)"
        case .shutdown: "redis client shut down"
        case .replicasBehind(let acknowledged, let required): "redis replicas behind: \(acknowledged) of \(required) acknowledged the write in time"
        }
    }
}
