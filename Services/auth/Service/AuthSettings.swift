import Foundation
import WhisperShared

/// Settings of auth (docs/configuration.md lists each variable).
public struct AuthSettings: ServiceSettings {
    public static let serviceName = "auth"
    public static let defaultPort = 8081
    public var common: CommonSettings
    /// Shared with the gateway; guards the internal frame endpoints.
    public var internalToken: String
    /// The token being rotated out, still accepted (`WHISPER_INTERNAL_TOKEN_PREVIOUS`).
    public var previousInternalToken: String?
    /// Where the internal frame endpoints (`/internal/v1/...`, called by gateways)
    /// listen: a port apart from the public one (key lookup, health, metrics).
    public var internalHTTP: HTTPSettings
    public static let defaultInternalPort = 8091
    /// The rate limits auth charges (`Limit.registry`, the `auth.` ones).
    public var limits = LimitRules()
    /// Device rows kept per identity, the active one included: older ones are deleted at
    /// the next sign-in (each sign-in on a new install adds one). Devices that are not
    /// active keep no push or VoIP token.
    public var devicesKeptPerIdentity = AuthSettings.defaultDevicesKept
    public static let defaultDevicesKept = 5
    /// The third-party auditors' public keys (`AUTH_KT_AUDITOR_KEYS`, Ed25519): only their
    /// signatures are taken at `POST /kt/audits` and served beside the head.
    public var auditorKeys: [[UInt8]] = []

    public init(
        common: CommonSettings, internalToken: String,
        internalHTTP: HTTPSettings = HTTPSettings(host: "127.0.0.1", port: AuthSettings.defaultInternalPort)
    ) {
        self.common = common
        self.internalToken = internalToken
        self.internalHTTP = internalHTTP
    }

    public init(from settings: SettingsReader) {
        common = CommonSettings(service: Self.serviceName, defaultPort: Self.defaultPort, from: settings)
        (internalToken, internalHTTP) = settings.internalEndpoint(service: Self.serviceName, defaultPort: Self.defaultInternalPort, public: common)
        previousInternalToken = settings.previousInternalToken()
        limits = LimitRules(from: settings, service: Self.serviceName)
        devicesKeptPerIdentity = settings.int("auth.devices.kept.per.identity", default: Self.defaultDevicesKept, range: 1...100)
        let auditors = settings.list("auth.kt.auditor.keys", default: [])
        auditorKeys = auditors.compactMap { Data(base64Encoded: $0).map(Array.init) }.filter { $0.count == 32 }
        if auditorKeys.count != auditors.count {
            settings.reject("auth.kt.auditor.keys", because: "must be base64 Ed25519 public keys of 32 bytes, comma separated (each auditor's, as it prints it)")
        }
    }
}

extension AuthSettings: RedactedDescription {}
