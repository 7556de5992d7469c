package sds

import (
	"fmt"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/spiffe/go-spiffe/v2/bundle/x509bundle"
	"github.com/spiffe/go-spiffe/v2/spiffeid"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/meshlet-dev/meshlet/mtls"
)

// Names on the wire.
const (
	// SecretTypeURL is the type of every SDS resource.
	SecretTypeURL = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"
	// CertificateResource is the name of the workload certificate secret.
	CertificateResource = "default"
	// RootCAResource is the name of the trust bundle secret.
	RootCAResource = "ROOTCA"
	// CSRMetadataKey is the node.metadata field carrying the PEM CSR.
	CSRMetadataKey = "CSR"
	// TokenAudience is the audience the ServiceAccount token must be bound to.
	TokenAudience = "meshlet"
	// SPIFFEValidatorName is Envoy's SPIFFE certificate validator extension,
	// the custom_validator_config name a SPIFFE-shaped ROOTCA carries.
	SPIFFEValidatorName = "envoy.tls.cert_validator.spiffe"
	// DefaultPort is the control plane's SDS (and xDS) port.
	DefaultPort = 15012
)

// certificateSecret is the "default" secret the meshlet server sends: the
// chain only, no private key.
func certificateSecret(chain []byte) (*anypb.Any, error) {
	return anypb.New(&tlsv3.Secret{
		Name: CertificateResource,
		Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: inline(chain),
		}},
	})
}

// rootCASecret is the ROOTCA secret: a plain trusted_ca when there is one
// trust domain, Envoy's SPIFFE-validator shape when there are several
// (federation), since a plain CA list cannot say which root vouches for
// which trust domain.
func rootCASecret(bundles []*x509bundle.Bundle) (*anypb.Any, error) {
	var vc *tlsv3.CertificateValidationContext
	if len(bundles) == 1 {
		vc = &tlsv3.CertificateValidationContext{TrustedCa: inline(mtls.EncodeCertificatesPEM(bundles[0].X509Authorities()))}
	} else {
		cfg := &tlsv3.SPIFFECertValidatorConfig{}
		for _, b := range bundles {
			cfg.TrustDomains = append(cfg.TrustDomains, &tlsv3.SPIFFECertValidatorConfig_TrustDomain{
				Name:        b.TrustDomain().Name(),
				TrustBundle: inline(mtls.EncodeCertificatesPEM(b.X509Authorities())),
			})
		}
		typed, err := anypb.New(cfg)
		if err != nil {
			return nil, err
		}
		vc = &tlsv3.CertificateValidationContext{CustomValidatorConfig: &corev3.TypedExtensionConfig{Name: SPIFFEValidatorName, TypedConfig: typed}}
	}
	return anypb.New(&tlsv3.Secret{Name: RootCAResource, Type: &tlsv3.Secret_ValidationContext{ValidationContext: vc}})
}

func inline(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}

// dataSourceBytes returns an inline data source's content. File and
// environment sources name something on the server's machine, not ours.
func dataSourceBytes(what string, ds *corev3.DataSource) ([]byte, error) {
	switch s := ds.GetSpecifier().(type) {
	case *corev3.DataSource_InlineBytes:
		return s.InlineBytes, nil
	case *corev3.DataSource_InlineString:
		return []byte(s.InlineString), nil
	case nil:
		return nil, fmt.Errorf("%s is empty", what)
	default:
		return nil, fmt.Errorf("%s is a %T data source; only inline bytes or strings are supported", what, s)
	}
}

// parseTLSCertificate decodes a TlsCertificate secret into a chain and, if
// the server sent one, its private key.
func parseTLSCertificate(sec *tlsv3.Secret) (*tlsCertificate, error) {
	tc := sec.GetTlsCertificate()
	if tc == nil {
		return nil, fmt.Errorf("secret %q is not a tls_certificate", sec.GetName())
	}
	chainPEM, err := dataSourceBytes("certificate_chain", tc.GetCertificateChain())
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", sec.GetName(), err)
	}
	chain, err := mtls.ParseCertificatesPEM(chainPEM)
	if err != nil {
		return nil, fmt.Errorf("secret %q certificate_chain: %w", sec.GetName(), err)
	}
	out := &tlsCertificate{chain: chain}
	if tc.GetPrivateKey() != nil {
		keyPEM, err := dataSourceBytes("private_key", tc.GetPrivateKey())
		if err != nil {
			return nil, fmt.Errorf("secret %q: %w", sec.GetName(), err)
		}
		if out.key, err = mtls.ParsePrivateKeyPEM(keyPEM); err != nil {
			return nil, fmt.Errorf("secret %q private_key: %w", sec.GetName(), err)
		}
	}
	return out, nil
}

// parseValidationContext decodes a ROOTCA secret into trust bundles. A plain
// trusted_ca belongs to plainTD (the workload's own trust domain); the
// SPIFFE-validator shape names its trust domains itself.
func parseValidationContext(sec *tlsv3.Secret, plainTD spiffeid.TrustDomain) ([]*x509bundle.Bundle, error) {
	vc := sec.GetValidationContext()
	if vc == nil {
		return nil, fmt.Errorf("secret %q is not a validation_context", sec.GetName())
	}
	if cvc := vc.GetCustomValidatorConfig(); cvc != nil {
		return parseSPIFFEValidator(sec.GetName(), cvc)
	}
	if vc.GetTrustedCa() == nil {
		return nil, fmt.Errorf("secret %q: validation_context has neither trusted_ca nor a SPIFFE custom_validator_config", sec.GetName())
	}
	caPEM, err := dataSourceBytes("trusted_ca", vc.GetTrustedCa())
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", sec.GetName(), err)
	}
	roots, err := mtls.ParseCertificatesPEM(caPEM)
	if err != nil {
		return nil, fmt.Errorf("secret %q trusted_ca: %w", sec.GetName(), err)
	}
	if plainTD.IsZero() {
		return nil, fmt.Errorf("secret %q: a plain trusted_ca needs the workload's trust domain, which is not known yet (no certificate and no configured ID)", sec.GetName())
	}
	return []*x509bundle.Bundle{x509bundle.FromX509Authorities(plainTD, roots)}, nil
}

func parseSPIFFEValidator(secret string, cvc *corev3.TypedExtensionConfig) ([]*x509bundle.Bundle, error) {
	if cvc.GetName() != SPIFFEValidatorName {
		return nil, fmt.Errorf("secret %q: custom_validator_config %q is not %s", secret, cvc.GetName(), SPIFFEValidatorName)
	}
	cfg := &tlsv3.SPIFFECertValidatorConfig{}
	if err := cvc.GetTypedConfig().UnmarshalTo(cfg); err != nil {
		return nil, fmt.Errorf("secret %q: typed_config of %s: %w", secret, SPIFFEValidatorName, err)
	}
	if cfg.GetTrustBundles() != nil {
		return nil, fmt.Errorf("secret %q: SPIFFE validator trust_bundles (a SPIFFE bundle map) is not supported; send trust_domains", secret)
	}
	if len(cfg.GetTrustDomains()) == 0 {
		return nil, fmt.Errorf("secret %q: SPIFFE validator has no trust_domains", secret)
	}
	var bundles []*x509bundle.Bundle
	for _, tdc := range cfg.GetTrustDomains() {
		td, err := spiffeid.TrustDomainFromString(tdc.GetName())
		if err != nil {
			return nil, fmt.Errorf("secret %q: SPIFFE validator trust domain %q: %w", secret, tdc.GetName(), err)
		}
		b, err := dataSourceBytes("trust_bundle of "+td.Name(), tdc.GetTrustBundle())
		if err != nil {
			return nil, fmt.Errorf("secret %q: %w", secret, err)
		}
		roots, err := mtls.ParseCertificatesPEM(b)
		if err != nil {
			return nil, fmt.Errorf("secret %q: trust bundle of %q: %w", secret, td.Name(), err)
		}
		if slices.ContainsFunc(bundles, func(x *x509bundle.Bundle) bool { return x.TrustDomain() == td }) {
			return nil, fmt.Errorf("secret %q: trust domain %q appears twice", secret, td.Name())
		}
		bundles = append(bundles, x509bundle.FromX509Authorities(td, roots))
	}
	return bundles, nil
}
