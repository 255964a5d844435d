// swift-tools-version:6.2
import PackageDescription

/// The eight executables. Each is a thin `main` over a library target of its own
/// (`<Name>Service`), so integration tests link exactly the code production runs.
let services: [(executable: String, library: String, folder: String, extra: [Target.Dependency])] = [
    ("gateway", "GatewayService", "gateway", [
        "WhisperMessaging",
        .product(name: "HummingbirdCore", package: "hummingbird"),
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
        .product(name: "NIOWebSocket", package: "swift-nio"),
        .product(name: "NIOHTTPTypes", package: "swift-nio-extras"),
        .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras"),
    ]),
    ("auth", "AuthService", "auth", []),
    ("router", "RouterService", "router", ["WhisperMessaging"]),
    ("push-sender", "PushSenderService", "push-sender", [
        "WhisperMessaging",
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
        .product(name: "JWTKit", package: "jwt-kit"),
        .product(name: "NIOSSL", package: "swift-nio-ssl"),
    ]),
    ("attachment-signer", "AttachmentSignerService", "attachment-signer", [
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
    ]),
    ("turn-cred", "TurnCredService", "turn-cred", []),
    ("admin", "AdminService", "admin", ["WhisperMessaging"]),
    ("gc-worker", "GCWorkerService", "gc-worker", [
        "WhisperMessaging",
        .product(name: "AsyncHTTPClient", package: "async-http-client"),
    ]),
]

let sharedDependencies: [Target.Dependency] = [
    "CHiredis",
    .product(name: "NIOSSL", package: "swift-nio-ssl"),
    .product(name: "AsyncHTTPClient", package: "async-http-client"),
    "CSodium",
    "CEd25519Verify",
    .product(name: "Hummingbird", package: "hummingbird"),
    .product(name: "PostgresNIO", package: "postgres-nio"),
    .product(name: "NIOCore", package: "swift-nio"),
    .product(name: "NIOPosix", package: "swift-nio"),
    .product(name: "Logging", package: "swift-log"),
    .product(name: "Metrics", package: "swift-metrics"),
    .product(name: "Prometheus", package: "swift-prometheus"),
    .product(name: "Configuration", package: "swift-configuration"),
    .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
    .product(name: "Crypto", package: "swift-crypto"),
    .product(name: "Tracing", package: "swift-distributed-tracing"),
    .product(name: "Instrumentation", package: "swift-distributed-tracing"),
    .product(name: "OTel", package: "swift-otel"),
]

/// What every service library imports directly besides WhisperShared.
let serviceDependencies: [Target.Dependency] = [
    .product(name: "Tracing", package: "swift-distributed-tracing"),
    .product(name: "Hummingbird", package: "hummingbird"),
    .product(name: "PostgresNIO", package: "postgres-nio"),
    .product(name: "Logging", package: "swift-log"),
    .product(name: "Prometheus", package: "swift-prometheus"),
    .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
    .product(name: "NIOCore", package: "swift-nio"),
    .product(name: "HTTPTypes", package: "swift-http-types"),
]

var targets: [Target] = [
    .systemLibrary(
        name: "CHiredis",
        path: "Shared/CHiredis",
        pkgConfig: "hiredis",
        providers: [.apt(["libhiredis-dev"])]
    ),
    .systemLibrary(
        name: "CSodium",
        path: "Shared/CSodium",
        pkgConfig: "libsodium",
        providers: [.apt(["libsodium-dev"])]
    ),
    // The services' Ed25519 verification against a prepared key (C of our own).
    .target(
        name: "CEd25519Verify",
        path: "Shared/CEd25519Verify"
    ),
    // What a client and the server share, and nothing of the server: frame types,
    // validation, limits, canonical signing bytes, IDs, error codes, backoff, clocks,
    // and the crypto a client needs (swift-crypto and Swift of its own). No system
    // library: scripts/check-sdk checks that the SDK's closure stays so.
    .target(
        name: "WhisperProtocol",
        dependencies: [
            .product(name: "Crypto", package: "swift-crypto"),
        ],
        path: "Shared/WhisperProtocol"
    ),
    .target(
        name: "WhisperShared",
        dependencies: ["WhisperProtocol"] + sharedDependencies,
        path: "Shared/WhisperShared"
    ),
    // The message store the services share: pending queues, stored receipts, the router
    // and push streams (Redis). Server-only: the services that move messages link it.
    .target(
        name: "WhisperMessaging",
        dependencies: ["WhisperShared", .product(name: "NIOCore", package: "swift-nio"), .product(name: "Crypto", package: "swift-crypto")],
        path: "Shared/WhisperMessaging"
    ),
    .target(
        name: "WhisperClient",
        dependencies: [
            "WhisperProtocol",
            .product(name: "WSClient", package: "swift-websocket"),
            .product(name: "HTTPTypes", package: "swift-http-types"),
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
            .product(name: "NIOHTTP1", package: "swift-nio"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOWebSocket", package: "swift-nio"),
        ],
        path: "Shared/WhisperClient"
    ),
    .testTarget(
        name: "WhisperClientTests",
        dependencies: ["WhisperClient", "WhisperShared"],
        path: "Tests/WhisperClientTests"
    ),
    .testTarget(
        name: "WhisperSharedTests",
        // CSodium: the client's crypto is checked against libsodium (ClientCryptoTests).
        dependencies: ["WhisperShared", "WhisperProtocol", "CSodium", .product(name: "NIOEmbedded", package: "swift-nio")],
        path: "Tests/WhisperSharedTests"
    ),
    .testTarget(
        name: "ContractTests",
        dependencies: ["WhisperShared", "WhisperProtocol"],
        path: "Tests/ContractTests",
        // Read by path from the repository (as docs/schemas/ is), not bundled.
        exclude: ["Fixtures"]
    ),
    // Tests of the services' own types that need no server (no Redis, Postgres or
    // socket): they run in a second or two, before the integration suite.
    .testTarget(
        name: "ServiceUnitTests",
        dependencies: [
            "WhisperShared", "WhisperMessaging", "TestWaiting",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOEmbedded", package: "swift-nio"),
            .product(name: "NIOWebSocket", package: "swift-nio"),
            .product(name: "Logging", package: "swift-log"),
        ] + services.map { .target(name: $0.library) },
        path: "Tests/ServiceUnitTests"
    ),
    .target(name: "TestWaiting", path: "Tests/TestWaiting"),
    .testTarget(
        name: "IntegrationTests",
        dependencies: [
            "TestWaiting",
            "WhisperShared",
            "WhisperMessaging",
            "WhisperClient",
            .product(name: "HummingbirdWSClient", package: "hummingbird-websocket"),
            .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
            "PushFakes",
            .product(name: "JWTKit", package: "jwt-kit"),
            .product(name: "NIOEmbedded", package: "swift-nio"),
        ] + services.map { .target(name: $0.library) },
        path: "Tests/IntegrationTests"
    ),
]

// Local APNs and FCM stand-ins (HTTP/2 over TLS, certificates made at run time) for the
// tests and the push benchmark.
targets.append(.target(
    name: "PushFakes",
    dependencies: [
        "PushSenderService",
        .product(name: "JWTKit", package: "jwt-kit"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
        .product(name: "NIOHTTP2", package: "swift-nio-http2"),
        .product(name: "NIOSSL", package: "swift-nio-ssl"),
        .product(name: "X509", package: "swift-certificates"),
        .product(name: "SwiftASN1", package: "swift-asn1"),
        .product(name: "Crypto", package: "swift-crypto"),
        .product(name: "_CryptoExtras", package: "swift-crypto"),
    ],
    path: "Tests/PushFakes"
))

targets.append(.executableTarget(
    name: "whisper-push-bench",
    dependencies: [
        "PushFakes", "WhisperShared", "WhisperMessaging",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "PostgresNIO", package: "postgres-nio"),
    ],
    path: "Tools/whisper-push-bench"
))

targets.append(.executableTarget(
    name: "whisper-load",
    dependencies: [
        "WhisperClient", "WhisperShared",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Crypto", package: "swift-crypto"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "NIOCore", package: "swift-nio"),
        .product(name: "NIOPosix", package: "swift-nio"),
        .product(name: "NIOHTTP1", package: "swift-nio"),
        .product(name: "NIOWebSocket", package: "swift-nio"),
    ],
    path: "Tools/whisper-load"
))

// The `whisper` command-line client: on the SDK alone, as an app would be.
targets.append(.executableTarget(
    name: "whisper",
    dependencies: [
        "WhisperClient", "WhisperProtocol",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "Crypto", package: "swift-crypto"),
    ],
    path: "Tools/whisper"
))

targets.append(.executableTarget(
    name: "whisper-faults",
    dependencies: [
        "WhisperClient", "WhisperShared",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Logging", package: "swift-log"),
    ],
    path: "Tools/whisper-faults"
))

targets.append(.executableTarget(
    name: "whisper-kt-bench",
    dependencies: [
        "WhisperShared",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
        .product(name: "Logging", package: "swift-log"),
        .product(name: "PostgresNIO", package: "postgres-nio"),
    ],
    path: "Tools/whisper-kt-bench"
))

// The minimal app of docs/sdk.md (Examples/WhisperExample): on the SDK alone, as an
// app's dependencies would be; ExampleAppTests runs it against the services.
targets.append(.executableTarget(
    name: "whisper-example",
    dependencies: ["WhisperClient"],
    path: "Examples/WhisperExample"
))

// An outside auditor of the key directory: on the SDK alone.
targets.append(.executableTarget(
    name: "whisper-audit",
    dependencies: [
        "WhisperClient", "WhisperProtocol",
        .product(name: "ArgumentParser", package: "swift-argument-parser"),
    ],
    path: "Tools/whisper-audit"
))

// Drives the decoders with libFuzzer (scripts/fuzz builds it with -sanitize=fuzzer);
// an ordinary build replays the checked-in corpus (Tests/Fuzz/corpus).
targets.append(.target(name: "CFuzzerDriver", path: "Tests/Fuzz/CFuzzerDriver"))
targets.append(.executableTarget(
    name: "whisper-fuzz",
    dependencies: ["WhisperShared", "WhisperMessaging", "CFuzzerDriver"],
    path: "Tests/Fuzz/Sources"
))

// The services allocate with jemalloc on Linux (libjemalloc-dev to build, libjemalloc2 to
// run): glibc's malloc was about a tenth of the gateway's CPU under load; with jemalloc
// the same build's gateway used a few per cent less CPU per message in runs side by
// side (docs/benchmarks.md, "Allocations"). Linked into the eight executables only, not
// the libraries, tests or tools. WHISPER_SYSTEM_MALLOC=1 at build time keeps glibc's.
let serviceLinkerSettings: [LinkerSetting] = Context.environment["WHISPER_SYSTEM_MALLOC"] == "1"
    ? [] : [.linkedLibrary("jemalloc", .when(platforms: [.linux]))]

for service in services {
    targets.append(.target(
        name: service.library,
        dependencies: ["WhisperShared"] + serviceDependencies + service.extra,
        path: "Services/\(service.folder)/Service"
    ))
    targets.append(.executableTarget(
        name: service.executable,
        dependencies: [.target(name: service.library), "WhisperShared"],
        path: "Services/\(service.folder)/Main",
        linkerSettings: serviceLinkerSettings
    ))
}

// Redis scripts (`.lua`) and the listener page's files (`.html`, `.css`, `.js`) are kept
// beside the code that uses them; the EmbedFiles build plugin (`Plugins/EmbedFiles`, a
// shell script run for each target) compiles each target's into string constants
// (`LuaSource`, `WebAssets`), so they ship inside the executables.
targets.append(.plugin(name: "EmbedFiles", capability: .buildTool(), path: "Plugins/EmbedFiles"))
let embeddingTargets: Set<String> = ["WhisperShared", "WhisperMessaging", "GatewayService", "RouterService", "PushSenderService"]
for target in targets where embeddingTargets.contains(target.name) {
    target.plugins = (target.plugins ?? []) + [.plugin(name: "EmbedFiles")]
}

let package = Package(
    name: "whisper-server",
    // macOS 15 for the whole package (the services use Synchronization's Mutex); iOS 16 is
    // the SDK's floor (swift-websocket's, and Clock and Duration): docs/sdk.md, "Platforms".
    platforms: [.macOS(.v15), .iOS(.v16)],
    products: services.map { .executable(name: $0.executable, targets: [$0.executable]) }
        + [
            .library(name: "WhisperShared", targets: ["WhisperShared"]),
            .library(name: "WhisperProtocol", targets: ["WhisperProtocol"]),
            .library(name: "WhisperClient", targets: ["WhisperClient"]),
            .executable(name: "whisper", targets: ["whisper"]),
        ],
    // Exact versions: the same source builds the same direct dependencies every time
    // (the image, CI and a developer's machine alike). Package.resolved, which would pin
    // the packages these bring in too, is not committed: the package mirrors this project
    // builds from carry commit IDs of their own. docs/operations.md, "Container image",
    // says how a build outside them locks the whole graph.
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird", exact: "2.28.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", exact: "2.8.1"),
        .package(url: "https://github.com/vapor/postgres-nio", exact: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio", exact: "2.101.3"),
        .package(url: "https://github.com/apple/swift-nio-extras", exact: "1.35.2"),
        .package(url: "https://github.com/apple/swift-log", exact: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", exact: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", exact: "2.4.1"),
        .package(url: "https://github.com/apple/swift-configuration", exact: "1.4.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", exact: "2.13.0"),
        .package(url: "https://github.com/apple/swift-crypto", exact: "4.5.2"),
        .package(url: "https://github.com/swift-server/async-http-client", exact: "1.37.0"),
        .package(url: "https://github.com/apple/swift-http-types", exact: "1.8.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", exact: "1.8.2"),
        .package(url: "https://github.com/hummingbird-project/swift-websocket", exact: "1.6.2"),
        .package(url: "https://github.com/vapor/jwt-kit", exact: "5.8.0"),
        .package(url: "https://github.com/apple/swift-nio-http2", exact: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl", exact: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates", exact: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", exact: "1.7.4"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", exact: "1.7.3"),
        // Traces over OTLP/HTTP only: the gRPC exporter (and its build) is left out.
        .package(url: "https://github.com/swift-otel/swift-otel", exact: "1.6.0", traits: ["OTLPHTTP"]),
    ],
    targets: targets,
    swiftLanguageModes: [.v6]
)
