import NIOSSL
import PostgresNIO

/// Where and how to reach Postgres, parsed from `postgres://user[:password]@host[:port]/database[?sslmode=...]`.
public struct PostgresSettings: Sendable {
    public var host: String
    public var port: Int
    public var username: String
    public var password: String?
    public var database: String
    /// `disable`, `prefer`, `require`, `verify-ca` or `verify-full`, as in libpq's
    /// `sslmode`, except that `require` verifies the server as `verify-full` does (a
    /// certificate worth asking for is worth checking).
    public var tlsMode: String
    /// PEM file of the CA that signed the server's certificate (`WHISPER_POSTGRES_CA_FILE`,
    /// or `sslrootcert` in the URL); nil: the system's roots.
    public var caFile: String?
    public var maximumConnections: Int

    public static let tlsModes = ["disable", "prefer", "require", "verify-ca", "verify-full"]

    public init(host: String, port: Int, username: String, password: String?, database: String, tlsMode: String = "disable", maximumConnections: Int = 10) {
        self.host = host
        self.port = port
        self.username = username
        self.password = password
        self.database = database
        self.tlsMode = tlsMode
        self.maximumConnections = maximumConnections
    }

    public init?(url: String) {
        let schemes = ["postgres://", "postgresql://"]
        guard let scheme = schemes.first(where: { url.hasPrefix($0) }) else { return nil }
        var rest = Substring(url.dropFirst(scheme.count))
        var tlsMode = "disable"
        var caFile: String?
        if let question = rest.firstIndex(of: "?") {
            for pair in rest[rest.index(after: question)...].split(separator: "&") {
                let parts = pair.split(separator: "=", maxSplits: 1)
                if parts.count == 2, parts[0] == "sslmode" {
                    tlsMode = String(parts[1])
                } else if parts.count == 2, parts[0] == "sslrootcert" {
                    caFile = String(parts[1]).removingPercentEncodingIfPossible
                }
            }
            rest = rest[..<question]
        }
        guard Self.tlsModes.contains(tlsMode) else { return nil }
        guard let at = rest.lastIndex(of: "@") else { return nil }
        let credentials = rest[..<at]
        rest = rest[rest.index(after: at)...]
        let username: String
        var password: String?
        if let colon = credentials.firstIndex(of: ":") {
            username = String(credentials[..<colon]).removingPercentEncodingIfPossible
            password = String(credentials[credentials.index(after: colon)...]).removingPercentEncodingIfPossible
        } else {
            username = String(credentials).removingPercentEncodingIfPossible
        }
        guard let slash = rest.firstIndex(of: "/") else { return nil }
        let database = String(rest[rest.index(after: slash)...])
        let hostPort = rest[..<slash]
        var host = String(hostPort)
        var port = 5432
        if let colon = hostPort.lastIndex(of: ":") {
            host = String(hostPort[..<colon])
            guard let number = Int(hostPort[hostPort.index(after: colon)...]) else { return nil }
            port = number
        }
        guard !username.isEmpty, !host.isEmpty, !database.isEmpty, (1...65535).contains(port) else { return nil }
        self.init(host: host, port: port, username: username, password: password, database: database, tlsMode: tlsMode)
        self.caFile = caFile
    }

    /// The same server, another database (tests make one database per suite).
    public func with(database: String) -> PostgresSettings {
        var copy = self
        copy.database = database
        return copy
    }

    /// What TLS the client asks for: verified against `caFile` (or the system's roots);
    /// `verify-ca` checks the chain and not the name.
    var tlsConfiguration: TLSConfiguration {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.minimumTLSVersion = .tlsv12
        if let caFile {
            configuration.trustRoots = .file(caFile)
        }
        if tlsMode == "verify-ca" {
            configuration.certificateVerification = .noHostnameVerification
        }
        return configuration
    }

    public var clientConfiguration: PostgresClient.Configuration {
        let tls: PostgresClient.Configuration.TLS = switch tlsMode {
        case "require", "verify-ca", "verify-full": .require(tlsConfiguration)
        case "prefer": .prefer(tlsConfiguration)
        default: .disable
        }
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: username, password: password, database: database, tls: tls
        )
        configuration.options.maximumConnections = maximumConnections
        configuration.options.connectTimeout = .seconds(3)
        return configuration
    }
}

/// Printed without the password: service descriptions reach debug logs (swift-service-lifecycle).
extension PostgresSettings: CustomStringConvertible, CustomDebugStringConvertible {
    public var description: String {
        "PostgresSettings(\(host):\(port)/\(database), user \(username), password \(password == nil ? "none" : "redacted"))"
    }

    public var debugDescription: String { description }
}
