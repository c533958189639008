package shardcast

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestConnOptionsDefaults(t *testing.T) {
	d := ConnOptions{}.WithDefaults()
	assert.Equal(t, DefaultSubscribeConns, d.SubscribeConns)
	assert.Equal(t, DefaultDialTimeout, d.DialTimeout)
	assert.Equal(t, DefaultReconnectMin, d.ReconnectMin)
	assert.Equal(t, DefaultReconnectMax, d.ReconnectMax)
	assert.Equal(t, DefaultRecoveryInterval, d.RecoveryInterval)
	assert.Equal(t, DefaultCommandTimeout, d.CommandTimeout)
	assert.Equal(t, DefaultHealthInterval, d.HealthInterval)
	assert.Equal(t, DefaultHealthTimeout, d.HealthTimeout)
	assert.Equal(t, DefaultWriteTimeout, d.WriteTimeout)
	assert.Equal(t, DefaultReplyTimeout, d.ReplyTimeout)
	assert.NoError(t, d.Validate())

	set := ConnOptions{SubscribeConns: 3, ReconnectMin: time.Second, ReconnectMax: time.Millisecond}.WithDefaults()
	assert.Equal(t, 3, set.SubscribeConns, "a set field is kept")
	assert.Equal(t, time.Second, set.ReconnectMax, "ReconnectMax is never below ReconnectMin")
}

func TestConnOptionsValidate(t *testing.T) {
	for name, o := range map[string]ConnOptions{
		"conns below 0":   {SubscribeConns: -1},
		"conns above max": {SubscribeConns: MaxSubscribeConns + 1},
		"dial":            {DialTimeout: -1},
		"reconnect min":   {ReconnectMin: -1},
		"reconnect max":   {ReconnectMax: -1},
		"recovery":        {RecoveryInterval: -1},
		"command":         {CommandTimeout: -1},
		"health interval": {HealthInterval: -1},
		"health timeout":  {HealthTimeout: -1},
		"write":           {WriteTimeout: -1},
		"reply":           {ReplyTimeout: -1},
	} {
		assert.ErrorIs(t, o.Validate(), ErrInvalidConfig, name)
	}
	assert.NoError(t, ConnOptions{SubscribeConns: MaxSubscribeConns}.Validate())
}
