package rating

import (
	"errors"
	"testing"
	"time"
)

func TestNormalize(t *testing.T) {
	at := time.Date(2026, 3, 1, 5, 0, 0, 0, time.UTC)
	good := Price{Kind: "gpu", GPUModel: "H100", Tier: "shared", InstanceType: "ignored", UnitPriceMicros: 50_000, EffectiveFrom: at}
	p, err := Normalize(good)
	if err != nil {
		t.Fatal(err)
	}
	if p.InstanceType != "" || p.Unit != "gib-hour" || p.Currency != "USD" {
		t.Fatalf("normalised %+v", p)
	}
	vm, err := Normalize(Price{Kind: "vm", InstanceType: "g1", GPUModel: "x", Tier: "dedicated", UnitPriceMicros: 1, EffectiveFrom: at})
	if err != nil || vm.GPUModel != "" || vm.Tier != "" || vm.Unit != "vm-hour" {
		t.Fatalf("vm price %+v %v", vm, err)
	}
	for field, edit := range map[string]func(*Price){
		"kind":              func(p *Price) { p.Kind = "tpu" },
		"gpu_model":         func(p *Price) { p.GPUModel = "" },
		"tier":              func(p *Price) { p.Tier = "gold" },
		"unit_price_micros": func(p *Price) { p.UnitPriceMicros = -1 },
		"currency":          func(p *Price) { p.Currency = "EUR" },
		"effective_from":    func(p *Price) { p.EffectiveFrom = at.Add(time.Minute) },
	} {
		p := good
		edit(&p)
		_, err := Normalize(p)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("%s: err %v", field, err)
		}
	}
	if _, err := Normalize(Price{Kind: "gpu", GPUModel: "H100", Tier: "dedicated", UnitPriceMicros: MaxUnitPriceMicros + 1, EffectiveFrom: at}); err == nil {
		t.Error("price above the bound accepted")
	}
}

func TestFormat(t *testing.T) {
	for got, want := range map[string]string{
		FormatCents(0): "0.00", FormatCents(1161): "11.61", FormatCents(-5): "-0.05",
		FormatMicros(4_250_000): "4.250000", FormatMicros(55_000): "0.055000",
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
}
