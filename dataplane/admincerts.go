package dataplane

import (
	"crypto/x509"
	"net/http"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Certificates is the workload certificate and trust bundles in Envoy's
// /certs shape (admin.v3.Certificates): one entry, the SDS-delivered
// identity, whose cert_chain is the chain (leaf first) and ca_cert the
// roots of every trust domain. Empty before the first certificate.
func (s *Server) Certificates(now time.Time) *adminv3.Certificates {
	out := &adminv3.Certificates{}
	store := s.opts.Identity
	if store == nil {
		return out
	}
	snap := store.Current()
	if snap.Certificate == nil {
		return out
	}
	c := &adminv3.Certificate{}
	for _, der := range snap.Certificate.Certificate {
		if x, err := x509.ParseCertificate(der); err == nil {
			c.CertChain = append(c.CertChain, certDetails("sds:default", x, now))
		}
	}
	for _, b := range snap.Bundles() {
		for _, x := range b.X509Authorities() {
			c.CaCert = append(c.CaCert, certDetails("sds:ROOTCA:"+b.TrustDomain().Name(), x, now))
		}
	}
	out.Certificates = append(out.Certificates, c)
	return out
}

func certDetails(path string, x *x509.Certificate, now time.Time) *adminv3.CertificateDetails {
	d := &adminv3.CertificateDetails{Path: path, SerialNumber: x.SerialNumber.Text(16),
		ValidFrom: timestamppb.New(x.NotBefore), ExpirationTime: timestamppb.New(x.NotAfter)}
	if left := x.NotAfter.Sub(now); left > 0 {
		d.DaysUntilExpiration = uint64(left / (24 * time.Hour))
	}
	for _, u := range x.URIs {
		d.SubjectAltNames = append(d.SubjectAltNames, &adminv3.SubjectAlternateName{Name: &adminv3.SubjectAlternateName_Uri{Uri: u.String()}})
	}
	for _, n := range x.DNSNames {
		d.SubjectAltNames = append(d.SubjectAltNames, &adminv3.SubjectAlternateName{Name: &adminv3.SubjectAlternateName_Dns{Dns: n}})
	}
	for _, ip := range x.IPAddresses {
		d.SubjectAltNames = append(d.SubjectAltNames, &adminv3.SubjectAlternateName{Name: &adminv3.SubjectAlternateName_IpAddress{IpAddress: ip.String()}})
	}
	return d
}

// adminCerts serves Certificates as JSON, as Envoy's /certs.
func (s *Server) adminCerts(w http.ResponseWriter, _ *http.Request) {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", UseProtoNames: true}.Marshal(s.Certificates(time.Now()))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
