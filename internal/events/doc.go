// Package events delivers a broker's Events to the application's OnEvent
// callback and log, in order, without ever blocking the engine that raised
// them.
package events
